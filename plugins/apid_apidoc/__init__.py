"""The `apidoc` controller: the API described for the caller's roles, from the IO State in force."""

from __future__ import annotations

from typing import Any

from apid.plugin import Call, Controller, NotFound, action


# what `api_view` answers, and the filter
class ApidocController(Controller, stores=("controller", "version", "roles", "controllers")):
    name = "apidoc"

    @action(answers="record", carries=("version", "controllers"))
    def show(self, call: Call) -> dict[str, Any]:
        """Every controller and action the caller's roles may call, with the fields they send and
        receive; `controller` narrows it to one. Read from the rule set in force at each call,
        so a reload shows at once."""
        document = self.services.api_view(call.caller.all_roles)
        wanted = call.fields.get("controller")
        if wanted is not None:
            if wanted not in document["controllers"]:
                raise NotFound(f"your roles may call no controller named {wanted!r}")
            document["controllers"] = {wanted: document["controllers"][wanted]}
        return document
