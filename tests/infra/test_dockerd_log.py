"""The test daemon's restart (`Dockerd.start_again`) retries only when this attempt's dockerd gave up on its
containerd: it reads the log from where the attempt began, since the log keeps every earlier attempt."""

from tests.infra.dockerd import CONTAINERD_TIMEOUT, _tail


def test_the_tail_since_an_offset_leaves_out_earlier_attempts(tmp_path):
    log = tmp_path / "dockerd.log"
    log.write_text(f"attempt 1\nfailed to start daemon: {CONTAINERD_TIMEOUT}\n")
    since = log.stat().st_size
    with open(log, "a") as f:
        f.write("attempt 2\nfailed to start daemon: permission denied\n")
    assert CONTAINERD_TIMEOUT in _tail(log)  # the whole log still has the first attempt's reason
    assert _tail(log, since=since) == "attempt 2\nfailed to start daemon: permission denied"


def test_the_tail_of_a_missing_log_says_so(tmp_path):
    assert _tail(tmp_path / "none.log", since=10) == "(no log)"
