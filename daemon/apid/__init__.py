"""apid: an API daemon on Twisted and Klein whose controllers are plugins governed by IO State."""
