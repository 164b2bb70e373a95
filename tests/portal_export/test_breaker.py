"""The key-level breaker: tripped by the client on a key-level answer, shared through a state dir."""

import json
from pathlib import Path
from urllib.parse import parse_qs

import pytest
import responses

from portal_export.breaker import KeyBreaker, fingerprint
from portal_export.captchaai import CaptchaAI
from portal_export.errors import KeyLevelError, PermanentError, TransientError
from portal_export.store import LocalStore

API = "https://ocr.test"
KEY = "k3y-0123456789abcdef0123456789ab"
OTHER_KEY = "0ther-k3y-fedcba9876543210fedcba"
PARAMS = {"googlekey": "6Le-sitekey", "pageurl": "https://portal.test/export?day=2026-09-01&region=north"}


def answer(body):
    return 200, {"Content-Type": "application/json"}, json.dumps(body)


class Api:
    """in.php / res.php answering from per-kind scripts; an unscripted request fails the test."""

    def __init__(self, rsps):
        self.rsps = rsps
        self.scripts = {"in.php": [], "get": [], "threadsinfo": []}
        for endpoint in ("in.php", "res.php"):
            rsps.add_callback(responses.POST, f"{API}/{endpoint}", callback=self._answer)

    def on(self, what, *bodies):
        self.scripts[what].extend(bodies)
        return self

    def _answer(self, request):
        form = parse_qs(request.body)
        what = "in.php" if request.url.endswith("/in.php") else form["action"][0]
        assert self.scripts[what], f"unscripted {what} request"
        return answer(self.scripts[what].pop(0))

    def keys_sent(self):
        return [parse_qs(c.request.body)["key"][0] for c in self.rsps.calls]


@pytest.fixture
def api():
    with responses.RequestsMock(assert_all_requests_are_fired=False) as rsps:
        yield Api(rsps)


def client(state_dir, key=KEY):
    return CaptchaAI(
        key,
        API,
        breaker=KeyBreaker(LocalStore(state_dir), key),
        first_poll_s=0,
        poll_every_s=0,
        clock=lambda: 0.0,
        sleep=lambda s: None,
    )


def state_files(data_dir):
    state = data_dir / "_state"
    return sorted(p for p in state.iterdir()) if state.exists() else []


@pytest.mark.parametrize("code", ["ERROR_WRONG_USER_KEY", "ERROR_KEY_DOES_NOT_EXIST", "IP_BANNED"])
def test_key_level_answer_trips_the_breaker_for_every_client_of_that_key(api, tmp_path, code):
    state = tmp_path / "state"
    api.on("in.php", {"status": 0, "request": code})
    with pytest.raises(KeyLevelError) as tripped:
        client(state).submit(PARAMS)
    assert len(api.rsps.calls) == 1

    with pytest.raises(KeyLevelError) as info:  # another client, same dir and key: nothing sent
        client(state).submit(PARAMS)
    assert info.value.code == code
    assert len(api.rsps.calls) == 1
    # the client that tripped it says what every other says (one alert fingerprint across hosts)
    assert str(tripped.value) == str(info.value) and "make clear-breaker" in str(info.value)
    with pytest.raises(KeyLevelError):
        client(state).threads()
    assert len(api.rsps.calls) == 1

    api.on("in.php", {"status": 1, "request": "7"})  # another key is unaffected
    assert client(state, OTHER_KEY).submit(PARAMS) == "7"
    assert api.keys_sent() == [KEY, OTHER_KEY]


def test_key_level_answer_while_polling_trips_it_too(api, tmp_path):
    api.on("in.php", {"status": 1, "request": "7"}).on("get", {"status": 0, "request": "IP_BANNED"})
    with pytest.raises(KeyLevelError):
        client(tmp_path).solve(PARAMS)
    with pytest.raises(KeyLevelError) as info:
        client(tmp_path).submit(PARAMS)
    assert info.value.code == "IP_BANNED"
    assert len(api.rsps.calls) == 2


def test_no_active_plan_trips_it(api, tmp_path):
    api.on("in.php", {"status": 0, "request": "ERROR_ZERO_BALANCE"}, {"status": 0, "request": "ERROR_ZERO_BALANCE"})
    api.on("threadsinfo", {"threads": "5", "working_threads": 0}, {"threads": "5", "working_threads": 0})
    with pytest.raises(KeyLevelError):
        client(tmp_path).submit(PARAMS)
    with pytest.raises(KeyLevelError) as info:
        client(tmp_path).submit(PARAMS)
    assert info.value.code == "ERROR_ZERO_BALANCE"
    assert len(api.rsps.calls) == 4


@pytest.mark.parametrize(
    "body, cls",
    [
        ({"status": 0, "request": "ERROR_PAGEURL"}, PermanentError),
        ({"status": 0, "request": "ERROR_PROXY_CONNECTION_FAILED"}, TransientError),  # not sent again: raised
    ],
)
def test_other_errors_leave_it_closed(api, tmp_path, body, cls):
    api.on("in.php", body, {"status": 1, "request": "8"})
    with pytest.raises(cls) as info:
        client(tmp_path).submit(PARAMS)
    assert not isinstance(info.value, KeyLevelError)
    assert state_files(tmp_path) == []
    assert client(tmp_path).submit(PARAMS) == "8"


def test_busy_plan_leaves_it_closed(api, tmp_path):
    api.on("in.php", {"status": 0, "request": "ERROR_ZERO_BALANCE"}, {"status": 1, "request": "9"})
    api.on("threadsinfo", {"threads": "5", "working_threads": 5})
    with pytest.raises(TransientError):
        client(tmp_path).submit(PARAMS)
    assert state_files(tmp_path) == []
    assert client(tmp_path).submit(PARAMS) == "9"


def test_clear_removes_it_and_lets_requests_out_again(api, tmp_path):
    api.on("in.php", {"status": 0, "request": "ERROR_WRONG_USER_KEY"}, {"status": 1, "request": "10"})
    with pytest.raises(KeyLevelError):
        client(tmp_path).submit(PARAMS)
    assert KeyBreaker.clear(LocalStore(tmp_path)) == ["ERROR_WRONG_USER_KEY"]
    assert state_files(tmp_path) == []
    assert client(tmp_path).submit(PARAMS) == "10"
    assert len(api.rsps.calls) == 2


def test_breaker_files_never_hold_the_key(api, tmp_path):
    api.on("in.php", {"status": 0, "request": "ERROR_WRONG_USER_KEY"})
    api.on("in.php", {"status": 1, "request": "11"}).on("get", {"status": 0, "request": "ERROR_KEY_DOES_NOT_EXIST"})
    with pytest.raises(KeyLevelError):
        client(tmp_path).submit(PARAMS)
    with pytest.raises(KeyLevelError):
        client(tmp_path, OTHER_KEY).solve(PARAMS)
    files = state_files(tmp_path)
    assert len(files) == 2  # one per key, named by a fingerprint
    for path in files:
        for key in (KEY, OTHER_KEY):
            assert key not in path.name
            assert key not in path.read_text()
    assert (
        json.loads(Path(KeyBreaker(LocalStore(tmp_path), KEY).location).read_text())["code"] == "ERROR_WRONG_USER_KEY"
    )
    assert fingerprint(KEY) != fingerprint(OTHER_KEY)
    assert KEY not in fingerprint(KEY)


def test_open_breaker_error_carries_no_key(tmp_path):
    breaker = KeyBreaker(LocalStore(tmp_path), KEY)
    breaker.trip("IP_BANNED", "in.php")
    with pytest.raises(KeyLevelError) as info:
        breaker.check()
    assert info.value.code == "IP_BANNED"
    assert KEY not in str(info.value) and KEY not in repr(info.value)
    assert info.value.__context__ is None or info.value.__suppress_context__


def test_check_without_state_dir_passes(tmp_path):
    KeyBreaker(LocalStore(tmp_path / "never-created"), KEY).check()
    assert KeyBreaker.clear(LocalStore(tmp_path / "never-created")) == []


def test_unreadable_breaker_file_keeps_it_open(tmp_path):
    breaker = KeyBreaker(LocalStore(tmp_path), KEY)
    Path(breaker.location).parent.mkdir(parents=True)
    Path(breaker.location).write_text("{not json")
    with pytest.raises(KeyLevelError) as info:
        breaker.check()
    assert info.value.code == "BREAKER_OPEN"
    assert KeyBreaker.clear(LocalStore(tmp_path)) == ["?"]
    breaker.check()
