"""Generate the runtime-config page (English or Korean) from the knob registry.

Role
----
``docs/en/runtime-config.md`` and ``docs/ko/runtime-config.md`` are the output
of :func:`render` over :data:`tailreactor.config.KNOBS`, so the pages cannot
disagree with the code or with each other.  The introduction and examples are
hand-written here (one text per language); every table, every knob section and
every error message is generated -- the error messages by actually parsing a
bad value, so they are the ones an operator will see.

Command line::

    python -m tailreactor.config_docs --lang en            # print the page
    python -m tailreactor.config_docs --lang ko --check    # compare with docs/ko/runtime-config.md

``--check`` exits 1 when the committed page differs from the generator's
output and prints the command that regenerates it; the test suite runs it.

The page opens with the "Tuning by symptom" table (:data:`SYMPTOMS`: symptom,
knob, what to try, what it costs) and a few facts that are true today and
easy to get wrong; each knob's section has its "when to change it" line
(``Knob.when_en``/``when_ko``) and its type cell names its unit.

Any registry row renders: an area without a hand-written title gets a section
named after the area, ``test_only`` rows go to the bench/test section, and a
knob without a recorded CWIST behaviour or "when" line says so instead of
being skipped.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from .config import KNOBS, ConfigError, Knob, load

__all__ = ["LANGS", "render", "page_path", "check", "main"]

LANGS = ("en", "ko")

#: How the bench server prefixes its error lines (``tailreactor.http.server.PROG``);
#: not imported, so generating the docs does not need the HTTP stack.
BENCH_PROG = "tailreactor-bench"

#: Area key -> section title per language, in page order.  ``test`` collects
#: every ``test_only`` row whatever its area.
AREA_TITLES: dict[str, dict[str, str]] = {
    "backend": {"en": "Backend", "ko": "백엔드"},
    "dispatch": {"en": "Dispatch", "ko": "디스패치"},
    "http": {"en": "HTTP", "ko": "HTTP"},
    "probe": {"en": "Latency probe", "ko": "지연 프로브"},
    "workers": {"en": "Workers", "ko": "워커"},
    "test": {"en": "Bench-only and test knobs", "ko": "벤치·테스트 전용 변수"},
}

#: One hand-written sentence or two under each area title.
AREA_INTROS: dict[str, dict[str, str]] = {
    "backend": {
        "en": "Which kernel interface reports readiness. Every backend runs the same round and the "
              "same dispatch policy (see [Architecture](architecture.md)).",
        "ko": "어떤 커널 인터페이스로 준비 상태를 받을지 정한다. 백엔드가 달라도 라운드와 디스패치 정책은 "
              "같은 코드다([아키텍처](architecture.md) 참고).",
    },
    "dispatch": {
        "en": "The order in which one round runs its callbacks, and what the round does between them "
              "(see [the round](architecture.md#one-round) and [the policy](architecture.md#the-policy)).",
        "ko": "한 라운드가 콜백을 어떤 순서로 실행하는지, 콜백 사이에 무엇을 하는지 정한다"
              "([라운드](architecture.md#한-라운드)와 [정책](architecture.md#디스패치-정책) 참고).",
    },
    "http": {
        "en": "How the bench HTTP server shares a reactor between connections that pipeline requests.",
        "ko": "요청을 파이프라이닝하는 연결들이 벤치 HTTP 서버의 리액터를 어떻게 나눠 쓰는지 정한다.",
    },
    "probe": {
        "en": "Optional per-reactor histograms of where the time goes. Off by default because every "
              "callback then costs extra clock reads.",
        "ko": "시간이 어디에 쓰이는지 리액터별 히스토그램으로 기록한다. 켜면 콜백마다 시계를 더 읽어야 "
              "하므로 기본값은 끔이다.",
    },
    "workers": {
        "en": "How many server processes share the listening port.",
        "ko": "리스닝 포트를 함께 쓰는 서버 프로세스 수를 정한다.",
    },
    "test": {
        "en": "These exist for the test suite and for the tail-latency job's controls. Never set them "
              "on a server whose numbers you mean to report.",
        "ko": "테스트와 꼬리 지연 작업의 대조 실험용이다. 결과를 보고할 서버에는 절대 설정하지 않는다.",
    },
}

# Labels and fixed phrases of the generated parts.
_T: dict[str, dict[str, str]] = {
    "en": {
        "other_link": "[한국어](../ko/runtime-config.md)",
        "title": "Runtime configuration",
        "cols": "| Variable | Type | Default | Accepted | 0 means | Backends |",
        "int": "integer", "choice": "choice", "bool": "flag", "path": "path",
        "with_unit": "{type} ({unit})",
        "units": {"us": "us", "s": "s", "requests": "requests", "callbacks": "callbacks",
                  "processes": "processes"},
        "when": "**When to change it:**",
        "no_when": "not written yet.",
        "symptoms_title": "Tuning by symptom",
        "symptoms_intro": "Start from what you see. Change one knob at a time and compare side by side "
                          "with the tail-latency job (`scripts/tail-latency.sh --a '...' --b '...'`): "
                          "on a shared machine only ratios measured in one run count.",
        "symptoms_cols": "| # | Symptom | Knob | What to try | What it costs |",
        "truths_title": "Worth knowing",
        "all": "all",
        "path_accepted": "a file path in an existing, writable directory (checked with "
                         "`CWIST_LATENCY_PROBE=1`)",
        "zero_error": "not accepted (error)",
        "zero_off": "off",
        "zero_plain": "no special meaning",
        "none": "—",
        "same_as": "same as `{name}`",
        "unset": "unset",
        "invalid": "Invalid value: `{name}={value}` stops with `ConfigError: {message}`.",
        "no_invalid": "Invalid value: none; any non-empty value is accepted.",
        "cwist_unknown": "no behaviour on invalid values is recorded.",
        "test_only": "Test and bench only.",
        "regen": "regenerate it with: python -m tailreactor.config_docs --lang {lang} > {path}",
    },
    "ko": {
        "other_link": "[English](../en/runtime-config.md)",
        "title": "런타임 설정",
        "cols": "| 변수 | 형식 | 기본값 | 허용 값 | 0의 의미 | 적용 백엔드 |",
        "int": "정수", "choice": "선택지", "bool": "플래그", "path": "경로",
        "with_unit": "{type}({unit})",
        "units": {"us": "us", "s": "s", "requests": "요청 수", "callbacks": "콜백 수",
                  "processes": "프로세스 수"},
        "when": "**언제 바꾸나:**",
        "no_when": "아직 쓰지 않았다.",
        "symptoms_title": "증상별 조정",
        "symptoms_intro": "보이는 증상에서 출발한다. 변수는 한 번에 하나만 바꾸고, 꼬리 지연 작업으로 나란히 "
                          "비교한다(`scripts/tail-latency.sh --a '...' --b '...'`). 함께 쓰는 머신에서는 한 "
                          "번의 실행 안에서 잰 비율만 믿을 수 있다.",
        "symptoms_cols": "| # | 증상 | 변수 | 해 볼 것 | 대가 |",
        "truths_title": "알아 둘 사실",
        "all": "모두",
        "path_accepted": "이미 있고 쓸 수 있는 디렉터리 안의 파일 경로(`CWIST_LATENCY_PROBE=1`일 때 "
                         "확인)",
        "zero_error": "허용 안 됨(오류)",
        "zero_off": "끔",
        "zero_plain": "특별한 의미 없음",
        "none": "—",
        "same_as": "`{name}` 값과 같음",
        "unset": "설정 안 됨",
        "invalid": "잘못된 값: `{name}={value}`이면 다음 오류를 내고 멈춘다: `ConfigError: {message}`",
        "no_invalid": "잘못된 값: 없음. 비어 있지 않으면 어떤 값이든 받는다.",
        "cwist_unknown": "잘못된 값을 어떻게 처리하는지 기록된 자료가 없다.",
        "test_only": "테스트·벤치 전용.",
        "regen": "다시 만들려면: python -m tailreactor.config_docs --lang {lang} > {path}",
    },
}

_INTRO = {
    "en": """\
The reference reads its settings from `CWIST_*` environment variables. The names are CWIST's, so one
set of names serves both projects; a few knobs exist only here and say so. This page is generated from
the registry in [`reference/tailreactor/config.py`](../../reference/tailreactor/config.py) and checked
by the test suite, so it lists exactly the variables the code reads.
""",
    "ko": """\
레퍼런스 구현은 설정을 `CWIST_*` 환경 변수에서 읽는다. 이름은 CWIST와 같아서 두 프로젝트가 한 벌의
이름을 함께 쓴다. 여기에만 있는 변수는 그렇다고 따로 적었다. 이 페이지는
[`reference/tailreactor/config.py`](../../reference/tailreactor/config.py)의 레지스트리에서 생성되고
테스트가 검사하므로, 코드가 읽는 변수가 빠짐없이 그대로 실린다.
""",
}

_READING = {
    "en": """\
## How values are read

- A variable that is unset, empty or only spaces takes its default. Spaces around a value are ignored.
- `tailreactor.config.load()` parses every variable at once. `tailreactor-bench` calls it once at start,
  before it forks its workers, and so does a `Reactor` created without an explicit `config`; nothing
  re-reads the environment later, so set variables before you start the process.
- Integers are plain decimal digits with an optional leading `-`: no `_`, no `+`, no `0x`, no units.
- Units: `us` = microseconds (1 s = 1000000 us), `ms` = milliseconds, `s` = seconds. The unit of every integer, a time or
  what it counts, is in its type cell: `integer (us)`.
- Parsing is **strict**. An invalid value raises `ConfigError`, whose message is one line naming the
  variable, the value and what is accepted; `tailreactor-bench` prints that line and exits with status 2.
  Each knob below shows the exact message for one bad value.
- CWIST instead falls back **silently** to a default or clamps the value (the "CWIST" line of each knob).
  We do not: a silent fallback makes an A/B run measure something other than what the operator asked
  for, and nothing in its output would tell.
- Settings that are valid but do nothing get one warning line each when `tailreactor-bench` starts
  (`tailreactor.config.warnings()`): a `CWIST_*` name that is not a knob but close to one (a typo such
  as `CWIST_REACTOR_TAILUS`, named with the knob it resembles), `CWIST_LATENCY_PROBE_FILE` without
  `CWIST_LATENCY_PROBE=1`, and `CWIST_RX_URING=1` on a backend without a receive operation. Other
  unknown `CWIST_*` names are CWIST's own settings sharing the environment and are left alone.
""",
    "ko": """\
## 값을 읽는 방식

- 설정하지 않았거나 비어 있거나 공백뿐인 변수는 기본값을 쓴다. 값 앞뒤의 공백은 무시한다.
- `tailreactor.config.load()`가 모든 변수를 한꺼번에 파싱한다. `tailreactor-bench`는 시작할 때 워커를
  포크하기 전에 한 번 이 함수를 부르고, `config`를 따로 넘기지 않고 만든 `Reactor`도 이 함수를 부른다.
  그 뒤에는 아무도 환경 변수를 다시 읽지 않으므로, 프로세스를 띄우기 전에 설정해야 한다.
- 정수는 십진 숫자로만 쓴다. 맨 앞의 `-`만 허용하고 `_`, `+`, `0x`, 단위는 받지 않는다.
- 단위: `us` = 마이크로초(1 s = 1000000 us), `ms` = 밀리초, `s` = 초. 정수 변수마다 그 단위(시간이든 세는 대상이든)를
  형식 칸에 적었다: `정수(us)`.
- 파싱은 **엄격**하다. 잘못된 값이면 `ConfigError`가 나고, 메시지 한 줄에 변수 이름, 값, 허용 범위가
  모두 들어 있다. `tailreactor-bench`는 그 한 줄을 출력하고 종료 코드 2로 끝난다. 아래 각 변수 항목에
  잘못된 값 하나에 대한 실제 메시지를 실었다.
- CWIST는 잘못된 값을 만나면 **조용히** 기본값으로 바꾸거나 범위 안으로 잘라 낸다(각 변수의 "CWIST" 줄).
  여기서는 그렇게 하지 않는다. 조용히 바뀐 값으로 A/B를 돌리면 운영자가 요청한 것과 다른 것을 재게 되고,
  출력 어디에도 그 사실이 드러나지 않기 때문이다.
- 값은 올바르지만 아무 효과가 없는 설정은 `tailreactor-bench`가 시작할 때 하나마다 경고 한 줄을 남긴다
  (`tailreactor.config.warnings()`). 변수가 아니지만 어떤 변수와 비슷한 `CWIST_*` 이름(예를 들어
  `CWIST_REACTOR_TAILUS` 같은 오타. 닮은 변수 이름을 함께 알려 준다), `CWIST_LATENCY_PROBE=1` 없이 설정한
  `CWIST_LATENCY_PROBE_FILE`, 수신 연산이 없는 백엔드에서의 `CWIST_RX_URING=1`이 그렇다. 그 밖의 모르는
  `CWIST_*` 이름은 같은 환경을 함께 쓰는 CWIST 자신의 설정이므로 그냥 둔다.
""",
}


@dataclass(frozen=True)
class Symptom:
    """One row of the "Tuning by symptom" table: what an operator sees, the knobs, what to try, the cost."""

    knobs: tuple[str, ...]
    seen: dict[str, str]
    try_: dict[str, str]
    cost: dict[str, str]


#: The "Tuning by symptom" table, in page order.  Every knob named must be a registry row
#: (tests/test_docs.py).  Costs are what the change does, not measured gains: those are A/B questions.
SYMPTOMS: tuple[Symptom, ...] = (
    Symptom(("CWIST_REACTOR_TAIL_US",),
            {"en": "p99 and above high while p50 is fine; some connections wait behind busy ones",
             "ko": "p50은 괜찮은데 p99 이상이 높다. 일부 연결이 바쁜 연결 뒤에서 기다린다"},
            {"en": "lower it (e.g. 1000) and A/B your value (B) against the default (A): "
                   "`scripts/tail-latency.sh --a 'CWIST_REACTOR_TAIL_US=3500' --b 'CWIST_REACTOR_TAIL_US=1000'` "
                   "(`--ab tail` compares 3600000 with 3500, not your value)",
             "ko": "낮춰 보고(예: 1000) 자신의 값(B)을 기본값(A)과 A/B 비교한다: "
                   "`scripts/tail-latency.sh --a 'CWIST_REACTOR_TAIL_US=3500' --b 'CWIST_REACTOR_TAIL_US=1000'` "
                   "(`--ab tail`은 자신의 값이 아니라 3600000과 3500을 비교한다)"},
            {"en": "more rounds reorder their aged events; CWIST's A/B could not tell an effect at 3500",
             "ko": "더 많은 라운드가 오래 기다린 이벤트를 재정렬한다. CWIST의 A/B로는 3500에서 효과를 가릴 수 없었다"}),
    Symptom(("CWIST_HTTP_YIELD_BATCH", "CWIST_HTTP_BATCH"),
            {"en": "one pipelining connection delays the other connections",
             "ko": "파이프라이닝하는 연결 하나가 다른 연결을 늦춘다"},
            {"en": "set CWIST_HTTP_YIELD_BATCH below CWIST_HTTP_BATCH (e.g. 4 with 16), or lower the batch",
             "ko": "CWIST_HTTP_YIELD_BATCH를 CWIST_HTTP_BATCH보다 작게(예: 16에 4) 주거나 배치를 낮춘다"},
            {"en": "a send and a posted continuation per yield: more CPU per request. With age-based dispatch "
                   "on (the default), an aged event skips the yield (the late bypass): on `mixed`, io_uring, with "
                   "CWIST_HTTP_YIELD_BATCH=4, tail on against off was a `regression` for the interactive clients, "
                   "p50 1.597, p99 2.547, p99.9 1.961 times (rounds 4.6 to 16.9 ms; every run polluted; "
                   "`benchmarks/results/study/20261201T142929Z-quick-custom.md`; its p99 rests on about 5 samples a "
                   "run and its pooled p99.9 on 4, which today's job shows as n/a: the p50 stands)",
             "ko": "양보할 때마다 전송 한 번과 포스트 한 번: 요청당 CPU가 는다. 나이 기반 디스패치가 켜져 있으면(기본값) "
                   "오래 기다린 이벤트는 양보를 건너뛴다(늦은 우회). `mixed`, io_uring, CWIST_HTTP_YIELD_BATCH=4에서 "
                   "tail 켬 대 끔은 대화형 클라이언트에 `regression`이었다. p50 1.597배, p99 2.547배, p99.9 1.961배"
                   "(라운드 4.6에서 16.9 ms로; 모든 실행이 polluted; "
                   "`benchmarks/results/study/20261201T142929Z-quick-custom.md`. 그 p99는 실행마다 샘플 약 5개에, 합친 "
                   "p99.9는 4개에 기대므로 지금의 작업은 n/a로 보인다. p50은 그대로다)"}),
    Symptom(("CWIST_REACTOR_AGE_FROM",),
            {"en": "idle keep-alive connections are elevated (many tail_elevations, few slow requests)",
             "ko": "유휴 keep-alive 연결이 승격된다(tail_elevations는 많은데 느린 요청은 적다)"},
            {"en": "`ready`: age counts only the wait after readiness",
             "ko": "`ready`: 준비된 뒤의 대기만 나이로 센다"},
            {"en": "no longer CWIST's definition: results stop comparing with CWIST's",
             "ko": "CWIST의 정의가 아니게 되어 CWIST의 결과와 비교할 수 없다"}),
    Symptom(("CWIST_REACTOR_DRAIN_CHUNK",),
            {"en": "posts from other threads are late (the probe's post delay is high)",
             "ko": "다른 스레드가 보낸 포스트가 늦다(프로브의 포스트 지연이 높다)"},
            {"en": "lower it (e.g. 1)", "ko": "낮춘다(예: 1)"},
            {"en": "a look at the post queue every N callbacks", "ko": "콜백 N개마다 포스트 큐를 한 번 본다"}),
    Symptom(("CWIST_REACTOR_ROUND_BUDGET_US",),
            {"en": "on io_uring, queue delay since arm grows in long rounds",
             "ko": "io_uring에서 긴 라운드일수록 등록 이후 큐 지연이 커진다"},
            {"en": "lower it", "ko": "낮춘다"},
            {"en": "one more `io_uring_enter` per interval", "ko": "간격마다 `io_uring_enter` 한 번 더"}),
    Symptom(("CWIST_HTTP_KEEP_ALIVE_TIMEOUT",),
            {"en": "descriptors run out with many idle clients",
             "ko": "유휴 클라이언트가 많아 디스크립터가 모자란다"},
            {"en": "lower it", "ko": "낮춘다"},
            {"en": "clients that pause reconnect more often", "ko": "쉬었다 오는 클라이언트가 더 자주 다시 연결한다"}),
    Symptom(("CWIST_WORKERS",),
            {"en": "one core saturated by the server, others idle",
             "ko": "서버가 코어 하나만 다 쓰고 나머지는 논다"},
            {"en": "one worker per core you can give the server",
             "ko": "서버에 내줄 수 있는 코어마다 워커 하나"},
            {"en": "a process (memory, a reactor) per worker; an uneven spread with few connections",
             "ko": "워커마다 프로세스(메모리, 리액터) 하나. 연결이 적으면 고르게 나뉘지 않는다"}),
    Symptom(("CWIST_LATENCY_PROBE",),
            {"en": "you cannot tell queue delay from service time",
             "ko": "큐 지연과 서비스 시간을 구별할 수 없다"},
            {"en": "`1`, then read the report (below)", "ko": "`1`로 켜고 보고를 읽는다(아래)"},
            {"en": "more clock reads per callback", "ko": "콜백마다 시계를 더 읽는다"}),
    Symptom(("CWIST_REACTOR_BACKEND",),
            {"en": "the start line says `backend epoll` where you expected io_uring",
             "ko": "io_uring을 기대했는데 시작 줄에 `backend epoll`이 나온다"},
            {"en": "read the warning's errno; allow `io_uring_setup` (seccomp, io_uring_disabled) or keep epoll",
             "ko": "경고의 errno를 본다. `io_uring_setup`을 허용하거나(seccomp, io_uring_disabled) epoll을 그대로 쓴다"},
            {"en": "none: `io_uring` makes a refused ring an error instead of a fallback",
             "ko": "없음: `io_uring`을 명시하면 거부된 링은 대체 대신 오류가 된다"}),
)

#: "Worth knowing": true today and easy to get wrong.  tests/test_docs.py checks the claims
#: against the code (the defaults, the probe file name).
_TRUTHS = {
    "en": """\
- At the defaults `CWIST_HTTP_YIELD_BATCH` equals `CWIST_HTTP_BATCH` (16), so a pass yields exactly where
  its batch ends anyway, and the late bypass changes nothing: skipping the yield while `dispatch_late()`
  is true matters only with a yield batch below the batch.
- `CWIST_RX_URING=1` behaves as `auto`: both use the receive operation where the backend has one
  (io_uring) and readiness plus `recv` elsewhere; `1` only adds a start-up warning where there is none.
  Neither chooses io_uring: `CWIST_REACTOR_BACKEND` does.
- Where the probe report goes: at shutdown each worker writes one block to stderr, every line tagged
  `[latency-probe] pid=.. worker=.. backend=..`; while the server runs, `GET /__probe` answers the
  snapshot of the worker that took the connection as JSON (404 with the probe off); with
  `CWIST_LATENCY_PROBE_FILE`, each worker also writes a JSON file at shutdown. In its name `{pid}` and
  `{worker}` are replaced and a placeholder left out is appended, so `/tmp/probe.json` becomes
  `/tmp/probe.json.4242.0` for pid 4242, worker 0; `python -m tailreactor.probe /tmp/probe.json`
  prints a table of every worker's files and of all of them merged.
""",
    "ko": """\
- 기본값에서는 `CWIST_HTTP_YIELD_BATCH`가 `CWIST_HTTP_BATCH`(16)와 같다. 그래서 패스는 어차피 배치가
  끝나는 자리에서 양보하고, 늦은 우회는 아무것도 바꾸지 않는다. `dispatch_late()`가 참일 때 양보를
  건너뛰는 것은 양보 배치가 배치보다 작을 때만 의미가 있다.
- `CWIST_RX_URING=1`은 `auto`와 똑같이 동작한다. 둘 다 백엔드에 수신 연산이 있으면(io_uring) 그것을 쓰고,
  없으면 준비 상태 확인 뒤 `recv`를 쓴다. `1`은 수신 연산이 없을 때 시작 경고를 하나 더할 뿐이다. 어느
  쪽도 io_uring을 고르지 않는다. 백엔드는 `CWIST_REACTOR_BACKEND`가 정한다.
- 프로브 보고가 가는 곳: 종료할 때 워커마다 stderr에 한 덩어리를 쓰고, 모든 줄에
  `[latency-probe] pid=.. worker=.. backend=..` 꼬리표가 붙는다. 서버가 도는 동안에는 `GET /__probe`가
  그 연결을 받은 워커의 스냅숏을 JSON으로 돌려준다(프로브가 꺼져 있으면 404). `CWIST_LATENCY_PROBE_FILE`을
  주면 워커마다 종료할 때 JSON 파일도 쓴다. 파일 이름에서 `{pid}`와 `{worker}`는 실제 값으로 바뀌고 빠진
  자리표시자는 끝에 붙으므로, pid 4242, 워커 0이면 `/tmp/probe.json`은 `/tmp/probe.json.4242.0`이 된다.
  `python -m tailreactor.probe /tmp/probe.json`은 워커별 파일과 그 전부를 합친 결과를 표로 보여 준다.
""",
}

_EXAMPLES = {
    "en": """\
## Examples

The arm of CWIST PR #375's A/B with age-based dispatch effectively off, on epoll (arm A, the baseline, of
`--ab tail`):

```sh
CWIST_REACTOR_BACKEND=epoll CWIST_REACTOR_TAIL_US=3600000 tailreactor-bench --port 3000
```

Measure queue age from readiness instead of arm time, with the latency probe on:

```sh
CWIST_REACTOR_AGE_FROM=ready CWIST_LATENCY_PROBE=1 tailreactor-bench
```

From Python, build a `Config` from a mapping instead of the process environment:

```python
from tailreactor import Reactor
from tailreactor.config import load

config = load({"CWIST_REACTOR_TAIL_US": "0", "CWIST_REACTOR_DRAIN_CHUNK": "0"})
with Reactor("epoll", config=config) as reactor:
    assert reactor.config.tail_us == 0
```

A bad value stops the server at start with one line and exit status 2:

```text
{error_example}
```
""",
    "ko": """\
## 예시

CWIST PR #375의 A/B 중 나이 기반 디스패치를 사실상 끈 비교군을 epoll에서 띄운다(`--ab tail`의 기준 비교군인 A):

```sh
CWIST_REACTOR_BACKEND=epoll CWIST_REACTOR_TAIL_US=3600000 tailreactor-bench --port 3000
```

나이를 등록 시각이 아니라 준비된 시각부터 재고, 지연 프로브도 켠다:

```sh
CWIST_REACTOR_AGE_FROM=ready CWIST_LATENCY_PROBE=1 tailreactor-bench
```

파이썬에서는 프로세스 환경 변수 대신 매핑으로 `Config`를 만들 수 있다:

```python
from tailreactor import Reactor
from tailreactor.config import load

config = load({"CWIST_REACTOR_TAIL_US": "0", "CWIST_REACTOR_DRAIN_CHUNK": "0"})
with Reactor("epoll", config=config) as reactor:
    assert reactor.config.tail_us == 0
```

잘못된 값이 있으면 서버는 시작하자마자 한 줄짜리 오류를 내고 종료 코드 2로 끝난다:

```text
{error_example}
```
""",
}


# -- one knob's cells ---------------------------------------------------------
def area_of(k: Knob) -> str:
    """Section key of a row: ``test`` for test-only rows, else its area."""
    return "test" if k.test_only else k.area


def _unit(k: Knob) -> str:
    """The row's ``unit``, else the time unit its name or attribute ends with (``_US``, ``_s``), else ""."""
    if k.unit:
        return k.unit
    for suffix, unit in (("_US", "us"), ("_MS", "ms"), ("_NS", "ns"), ("_S", "s")):
        if k.name.endswith(suffix) or k.attr.upper().endswith(suffix):
            return unit
    return ""


def _type(k: Knob, t: dict[str, str]) -> str:
    text = t.get(k.kind, k.kind)
    unit = _unit(k) if k.kind == "int" else ""
    unit = t["units"].get(unit, unit)
    return t["with_unit"].format(type=text, unit=unit) if unit else text


def _code(value: object) -> str:
    return f"`{value}`"


def _default(k: Knob, t: dict[str, str]) -> str:
    if k.default is None:
        if k.default_text.startswith("CWIST_"):
            return t["same_as"].format(name=k.default_text)
        return k.default_text or t["unset"]
    if k.kind == "bool":
        return _code(1 if k.default else 0)
    return _code(k.default)


def _accepted(k: Knob, t: dict[str, str]) -> str:
    if k.kind == "int":
        return f"{_code(k.lo)}–{_code(k.hi)}"
    if k.kind == "choice":
        return ", ".join(_code(c) for c in k.choices)
    if k.kind == "bool":
        return "`0`, `1`"
    return t["path_accepted"]


def _zero(k: Knob, lang: str, t: dict[str, str]) -> str:
    text = k.zero_en if lang == "en" else k.zero_ko
    if text:
        return text
    if k.kind == "int":
        return t["zero_plain"] if k.lo <= 0 <= k.hi else t["zero_error"]
    if k.kind == "bool":
        return t["zero_off"]
    return t["none"]


def _backends(k: Knob, t: dict[str, str]) -> str:
    if not k.backends or "all" in k.backends:
        return t["all"]
    return ", ".join(_code(b) for b in k.backends)


def invalid_example(k: Knob) -> tuple[str, str] | None:
    """``(bad_value, ConfigError message)`` for one value ``k`` rejects, or None.

    The message comes from :meth:`Knob.parse` itself, so the docs show exactly
    what an operator sees (for ``path``, with the probe on: only then is it
    checked).  ``None`` when no candidate is rejected.
    """
    if k.kind == "path":  # checked by load() once the probe is on (config.check_probe_file)
        raw = "/nonexistent/probe.json"
        try:
            load({"CWIST_LATENCY_PROBE": "1", k.name: raw})
        except ConfigError as exc:
            return raw, str(exc)
        return None
    candidates: list[str] = []
    if k.kind == "int":
        candidates.append(str(k.lo - 1) if k.lo is not None else "-1")
    elif k.kind == "choice" and k.choices:
        candidates.append(k.choices[0].upper())
    elif k.kind == "bool":
        candidates.append("yes")
    candidates += ["abc", "-1"]
    for raw in candidates:
        try:
            k.parse(raw)
        except ConfigError as exc:
            return raw, str(exc)
    return None


def _cwist_line(k: Knob, lang: str, t: dict[str, str]) -> str:
    text = (k.cwist_invalid_en if lang == "en" else k.cwist_invalid_ko).strip()
    if text.startswith("CWIST:"):
        text = text[len("CWIST:"):].strip()
    return f"- **CWIST:** {text or t['cwist_unknown']}"


def _cell(text: str) -> str:
    """Make text safe inside a table cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def _symptom_table(lang: str, t: dict[str, str]) -> list[str]:
    out = [f"## {t['symptoms_title']}", "", t["symptoms_intro"], "", t["symptoms_cols"], "|---|---|---|---|---|"]
    for n, row in enumerate(SYMPTOMS, 1):
        knobs = ", ".join(f"[`{name}`](#{name.lower()})" for name in row.knobs)
        cells = [str(n), row.seen[lang], knobs, row.try_[lang], row.cost[lang]]
        out.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return out + ["", f"## {t['truths_title']}", "", _TRUTHS[lang].rstrip("\n"), ""]


# -- the page ---------------------------------------------------------------
def _grouped(knobs: Sequence[Knob]) -> list[tuple[str, list[Knob]]]:
    order = [a for a in AREA_TITLES]
    for k in knobs:
        if area_of(k) not in order:
            order.append(area_of(k))  # an area nobody titled yet still renders
    groups = [(a, [k for k in knobs if area_of(k) == a]) for a in order]
    return [(a, ks) for a, ks in groups if ks]


def _error_example(knobs: Sequence[Knob]) -> str:
    """A shell session: one bad value given to ``tailreactor-bench`` and its one-line answer.

    The message is :class:`ConfigError`'s own; ``tests/test_docs.py`` runs the
    real server with the same value and compares its stderr with this text.
    """
    preferred = [k for k in knobs if k.name == "CWIST_HTTP_BATCH"] + list(knobs)
    for k in preferred:
        bad = ("abc", None) if k.kind == "int" else invalid_example(k)
        if bad is None:
            continue
        try:
            k.parse(bad[0])
        except ConfigError as exc:
            return f"$ {k.name}={bad[0]} tailreactor-bench\n{BENCH_PROG}: {exc}"
    return ""


def render(lang: str, knobs: Iterable[Knob] | None = None) -> str:
    """The whole runtime-config page for ``lang`` (``en`` or ``ko``) as Markdown text.

    ``knobs`` defaults to :data:`tailreactor.config.KNOBS`.  Raises
    ``ValueError`` for an unknown language.
    """
    if lang not in LANGS:
        raise ValueError(f"--lang {lang!r} is not supported: accepted {', '.join(LANGS)}")
    knobs = list(KNOBS if knobs is None else knobs)
    t = _T[lang]
    out: list[str] = [
        t["other_link"],
        "",
        f"# {t['title']}",
        "",
        f"<!-- Generated by `python -m tailreactor.config_docs --lang {lang}` from "
        "tailreactor.config.KNOBS. Do not edit by hand: edit the registry or "
        "reference/tailreactor/config_docs.py and regenerate. -->",
        "",
        _INTRO[lang].rstrip("\n"),
        "",
        *_symptom_table(lang, t),
        _READING[lang].rstrip("\n"),
        "",
    ]
    for area, rows in _grouped(knobs):
        title = AREA_TITLES.get(area, {}).get(lang) or area.capitalize()
        out += [f"## {title}", ""]
        intro = AREA_INTROS.get(area, {}).get(lang)
        if intro:
            out += [intro, ""]
        out += [t["cols"], "|---|---|---|---|---|---|"]
        for k in rows:
            cells = [f"[`{k.name}`](#{k.name.lower()})", _type(k, t), _default(k, t),
                     _accepted(k, t), _zero(k, lang, t), _backends(k, t)]
            out.append("| " + " | ".join(_cell(c) for c in cells) + " |")
        out.append("")
        for k in rows:
            out += [f"### `{k.name}`", ""]
            help_text = k.help_en if lang == "en" else k.help_ko
            if k.test_only:
                help_text = f"**{t['test_only']}** {help_text}"
            out += [help_text, ""]
            when = (k.when_en if lang == "en" else k.when_ko).strip() or t["no_when"]
            out.append(f"- {t['when']} {when}")
            bad = invalid_example(k)
            if bad:
                out.append("- " + t["invalid"].format(name=k.name, value=bad[0], message=bad[1]))
            else:
                out.append("- " + t["no_invalid"])
            out += [_cwist_line(k, lang, t), ""]
    out.append(_EXAMPLES[lang].replace("{error_example}", _error_example(knobs)).rstrip("\n"))
    return "\n".join(out) + "\n"


# -- check and command line ---------------------------------------------------------
def page_path(lang: str, root: Path | None = None) -> Path:
    """Where the committed page lives: ``<repo>/docs/<lang>/runtime-config.md``.

    ``root`` defaults to the checkout this module was imported from (an
    editable install), else the current directory.
    """
    if root is None:
        here = Path(__file__).resolve().parents[2]
        root = here if (here / "docs").is_dir() else Path.cwd()
    return root / "docs" / lang / "runtime-config.md"


def check(lang: str, path: Path | None = None, knobs: Iterable[Knob] | None = None) -> tuple[bool, str]:
    """Compare the page at ``path`` with :func:`render`; return ``(ok, message)``.

    ``message`` is one line when ok; otherwise it names the file, shows the
    first differing lines and says how to regenerate.
    """
    path = Path(path) if path is not None else page_path(lang)
    want = render(lang, knobs)
    regen = _T["en"]["regen"].format(lang=lang, path=path)
    try:
        have = path.read_text(encoding="utf-8")
    except OSError as exc:
        return False, f"{path}: cannot read ({exc.strerror}); {regen}"
    if have == want:
        return True, f"{path}: up to date"
    diff = list(difflib.unified_diff(have.splitlines(), want.splitlines(),
                                     f"{path} (committed)", "generated", lineterm="", n=1))
    shown = "\n".join(diff[:40]) + ("\n..." if len(diff) > 40 else "")
    return False, f"{path} differs from the registry; {regen}\n{shown}"


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tailreactor.config_docs --lang en|ko [--check] [--file PATH]``.

    Prints the page (UTF-8) and returns 0; with ``--check`` returns 1 when the
    committed page is out of date (message on stderr).
    """
    parser = argparse.ArgumentParser(
        prog="python -m tailreactor.config_docs",
        description="Print (or --check) the runtime-config page of the CWIST_* knob registry.")
    parser.add_argument("--lang", required=True, choices=LANGS)
    parser.add_argument("--check", action="store_true",
                      help="exit 1 if the committed page differs from the generated one")
    parser.add_argument("--file", type=Path, default=None,
                      help="page to check (default: docs/<lang>/runtime-config.md of this checkout)")
    args = parser.parse_args(argv)
    if args.check:
        ok, message = check(args.lang, args.file)
        print(message, file=sys.stdout if ok else sys.stderr)
        return 0 if ok else 1
    # Write bytes: the Korean page must not depend on the terminal's locale.
    sys.stdout.buffer.write(render(args.lang).encode("utf-8"))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
