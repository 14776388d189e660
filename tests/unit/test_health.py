"""What /health answers as conditions come and go (apid.telemetry.health)."""

from apid.telemetry.health import Health


def test_it_passes_with_no_condition():
    assert Health().document("0.1") == (200, {"status": "pass", "version": "0.1"})


def test_it_fails_while_any_condition_holds_naming_each():
    health = Health()
    health.fail("draining", "draining before a stop")
    health.fail("database", "the database cannot be reached")
    status, body = health.document("0.1")
    assert status == 503
    assert body == {
        "status": "fail",
        "version": "0.1",
        "output": "the database cannot be reached; draining before a stop",
        "checks": {
            "database": [{"status": "fail", "output": "the database cannot be reached"}],
            "draining": [{"status": "fail", "output": "draining before a stop"}],
        },
    }
    health.passes("database")
    assert health.document("0.1")[1]["output"] == "draining before a stop"
    health.passes("draining")
    health.passes("never failed")
    assert health.document("0.1")[0] == 200
    assert dict(health.failing) == {}
