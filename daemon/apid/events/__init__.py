"""The live event stream, `GET /events`: every subscriber told, as Server-Sent Events, of the
changes it may see, with its own fields of each (docs/events.md).

`copies` decides what one subscriber is sent of one change, `stream` is one open stream,
`feed` this process's reader of the change log and its streams, `tickets` the single-use
tickets `EventSource` opens a stream with, and `endpoint` the HTTP side of it all.
"""
