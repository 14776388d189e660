"""A first apid controller: it greets whoever asks, and IO State decides who sees what."""

from apid.plugin import Call, Controller, action


class HelloController(Controller):
    name = "hello"  # the IO State NAME and the URL segment: /v0.1/hello/...

    @action(requires=("name",))  # a call without a name is a 400 problem; this never runs
    def greet(self, call: Call) -> dict:
        # Return everything: apid keeps only the RESPONSE fields of the caller's roles.
        return {"greeting": f"Hello, {call.fields['name']}!", "askedBy": call.caller.username}
