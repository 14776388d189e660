from harness import ADMIN


def test_health_is_public(daemon):
    reply = daemon.request("GET", "/health")
    assert reply.status == 200
    assert reply.json == {"status": "pass", "version": "0.1"}


def test_admin_logs_in_and_reads_own_record(daemon, admin_token):
    reply = daemon.request("GET", "/v0.1/person/show/1", token=admin_token)
    assert reply.status == 200
    assert reply.json["username"] == ADMIN[0]
    assert "password" not in reply.json
