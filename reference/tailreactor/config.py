"""Runtime configuration: every ``CWIST_*`` knob in one table, parsed strictly.

Role
----
This module is the single source of truth for the environment variables the
reference reads.  Each knob is one :class:`Knob` row (name, type, default,
accepted range, what 0 means, which backends it affects, one-line help in
English and Korean).  The runtime-config docs are generated from this table, so
the docs cannot disagree with the code.

Names are CWIST's (see ``shared/notes/upstream-cwist.md`` section 2) so both
projects share one set of docs.

Strict parsing, and how it differs from CWIST
---------------------------------------------
CWIST silently falls back to a default on a bad value (``CWIST_HTTP_BATCH=abc``
gives 16).  A silent fallback makes an A/B measure something other than what the
operator asked for, so here every invalid value raises :class:`ConfigError`
naming the variable, the value, and what is accepted.  Unset or empty means
"use the default".
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, make_dataclass
from typing import Any, Mapping

__all__ = ["ConfigError", "Knob", "KNOBS", "Config", "load", "knob", "probe_file_path", "check_probe_file"]


class ConfigError(ValueError):
    """An environment variable holds a value the reference does not accept.

    The message is one line: ``CWIST_X='value' is invalid: accepted ...``.
    Attributes ``name``, ``value`` and ``accepted`` carry the same facts.
    """

    def __init__(self, name: str, value: str, accepted: str):
        self.name, self.value, self.accepted = name, value, accepted
        super().__init__(f"{name}={value!r} is invalid: accepted {accepted}")


@dataclass(frozen=True)
class Knob:
    """One row of the registry.

    ``kind`` is ``int`` (decimal integer in ``[lo, hi]``), ``choice`` (one of
    ``choices``, or one of ``prefixes`` followed by a non-empty value), ``bool`` (exactly ``0`` or ``1``) or ``path`` (any non-empty
    string).  ``default=None`` means "derived" and ``default_text`` says from
    what.  ``backends`` is a tuple of backend names the knob affects, or
    ``("all",)``.  ``unit`` is what an ``int`` counts (``us``, ``s``,
    ``requests``, ...).  ``when_en``/``when_ko`` say when an operator should
    change it and what that costs (the docs' "when to change it" line).
    """

    name: str
    attr: str
    kind: str
    default: Any
    area: str
    help_en: str
    help_ko: str
    lo: int | None = None
    hi: int | None = None
    choices: tuple[str, ...] = ()
    prefixes: tuple[str, ...] = ()  # a choice knob also takes PREFIX + a value: (("cabi:", "PATH"),)
    zero_en: str = ""
    zero_ko: str = ""
    default_text: str = ""
    backends: tuple[str, ...] = ("all",)
    cwist_invalid_en: str = ""
    cwist_invalid_ko: str = ""
    test_only: bool = False
    unit: str = ""
    when_en: str = ""
    when_ko: str = ""

    def accepted(self) -> str:
        """Human-readable description of the accepted values (English)."""
        if self.kind == "int":
            return f"an integer from {self.lo} to {self.hi}"
        if self.kind == "choice":
            return "one of " + ", ".join(self.choices) + "".join(f", or {p}{what}" for p, what in self.prefixes)
        if self.kind == "bool":
            return "0 or 1"
        return "a file path in an existing, writable directory (checked with CWIST_LATENCY_PROBE=1)"

    def _is_choice(self, text: str) -> bool:
        return text in self.choices or any(text.startswith(p) and text[len(p):].strip()
                                           for p, _ in self.prefixes)

    def parse(self, raw: str) -> Any:
        """Parse one raw string; raise :class:`ConfigError` if it is not accepted."""
        text = raw.strip()
        if self.kind == "int":
            # int() alone would accept "1_000" and " +5"; operators type digits.
            body = text[1:] if text[:1] == "-" else text
            # isdigit() alone accepts "²" and Arabic-Indic digits; operators type ASCII.
            if not (body.isascii() and body.isdigit()):
                raise ConfigError(self.name, raw, self.accepted())
            try:
                value = int(text)
            except ValueError:  # more digits than int() parses (4300): far out of range anyway
                raise ConfigError(self.name, raw, self.accepted()) from None
            if not (self.lo <= value <= self.hi):
                raise ConfigError(self.name, raw, self.accepted())
            return value
        if self.kind == "choice":
            if not self._is_choice(text):
                raise ConfigError(self.name, raw, self.accepted())
            return text
        if self.kind == "bool":
            if text not in ("0", "1"):
                raise ConfigError(self.name, raw, self.accepted())
            return text == "1"
        if not text:
            raise ConfigError(self.name, raw, self.accepted())
        return text

    def check(self, value: Any) -> Any:
        """Return ``value`` if :meth:`parse` could have given it (or it is a ``None``
        default); raise :class:`ConfigError` otherwise.  What ``Config.replace`` checks."""
        if value is None:
            ok = self.default is None
        elif self.kind == "int":
            ok = type(value) is int and self.lo <= value <= self.hi
        elif self.kind == "choice":
            ok = isinstance(value, str) and self._is_choice(value)
        elif self.kind == "bool":
            ok = type(value) is bool
        else:
            ok = isinstance(value, str) and value.strip() != ""
        if not ok:
            raise ConfigError(self.name, value, self.accepted())
        return value


# The registry.  Order is the order of the generated docs within each area.
KNOBS: tuple[Knob, ...] = (
    Knob(
        name="CWIST_REACTOR_BACKEND", attr="backend", kind="choice", default="auto",
        choices=("auto", "io_uring", "epoll", "selectors"), prefixes=(("cabi:", "PATH"),), area="backend",
        help_en="Event backend. `auto` tries io_uring and falls back to epoll with a logged reason; "
                "an explicit `io_uring` that cannot start is an error, never a silent fallback. "
                "`cabi:PATH` is a backend in a shared library with the C ABI of "
                "`conformance/include/tailreactor_backend.h` (a C, Rust or Go port; "
                "`make -C examples/c-backend` builds one); one that cannot load is an error.",
        help_ko="이벤트 백엔드. `auto`는 io_uring을 먼저 시도하고, 안 되면 이유를 로그에 남긴 뒤 epoll로 "
                "넘어간다. `io_uring`을 명시했는데 시작할 수 없으면 조용히 넘어가지 않고 오류로 끝낸다. "
                "`cabi:PATH`는 `conformance/include/tailreactor_backend.h`의 C ABI를 따르는 공유 라이브러리의 "
                "백엔드다(C, Rust, Go 포트. `make -C examples/c-backend`가 하나를 만든다). 불러올 수 없으면 오류다.",
        when_en="To compare backends or to pin one: `epoll` where io_uring is refused (the start-up "
                "warning names the errno), `io_uring` where a silent fallback would spoil a "
                "measurement; otherwise leave `auto`.",
        when_ko="백엔드를 비교하거나 하나로 고정할 때. io_uring이 거부되는 곳(시작 경고에 errno가 나온다)에서는 `epoll`, 조용히 다른 백엔드로 넘어가면 "
                "측정을 망치는 곳에서는 `io_uring`을 준다. 그 밖에는 `auto`로 둔다.",
        cwist_invalid_en="CWIST: only `epoll` changes anything; other values mean io_uring.",
        cwist_invalid_ko="CWIST: `epoll`만 의미가 있고 그 밖의 값은 io_uring으로 취급한다.",
    ),
    Knob(
        name="CWIST_REACTOR_TAIL_US", attr="tail_us", kind="int", default=3500, lo=0, hi=86_400_000_000,
        area="dispatch",
        zero_en="age-based dispatch off: no reordering, no elevation, backend order",
        zero_ko="나이 기반 디스패치 끔: 재정렬도 승격도 없이 백엔드 순서대로",
        help_en="Queue age (us) at or above which an event is dispatched ahead of events that waited "
                "less in its round, and sees `dispatch_late()` true during its callback. 3600000 is the "
                "'effectively off' arm of CWIST PR #375's A/B.",
        help_ko="큐 대기 시간(us)이 이 값 이상인 이벤트는 같은 라운드에서 덜 기다린 이벤트보다 먼저 "
                "디스패치되고, 그 콜백이 도는 동안 `dispatch_late()`가 참이 된다. 3600000은 CWIST PR "
                "#375의 A/B에서 '사실상 끔'으로 쓴 값이다.",
        unit="us",
        when_en="When p99 and above rise while p50 stays, because some connections wait behind busy "
                "ones: lower it so aged events go first sooner, or set 0 for a baseline without the "
                "policy. Whether it helps your load is an A/B question (`scripts/tail-latency.sh --ab "
                "tail`); CWIST's own A/B found it neutral.",
        when_ko="p50은 그대로인데 p99 이상이 오를 때, 즉 일부 연결이 바쁜 연결 뒤에서 기다릴 때. 낮추면 오래 기다린 이벤트가 더 일찍 앞으로 나오고, 0이면 "
                "정책 없는 기준선이 된다. 실제 부하에 도움이 되는지는 A/B로 확인한다(`scripts/tail-latency.sh --ab tail`). CWIST "
                "자신의 A/B에서는 차이가 없었다.",
        cwist_invalid_en="CWIST: PR #375 (closed unmerged) gives 3500 as the default and 0 as "
                         "off; how it treats an invalid value is not recorded.",
        cwist_invalid_ko="CWIST: PR #375(병합되지 않고 닫힘)는 기본값 3500, 0이면 끔으로 정했다. "
                         "잘못된 값을 어떻게 처리했는지는 기록이 없다.",
    ),
    Knob(
        name="CWIST_REACTOR_AGE_FROM", attr="age_from", kind="choice", default="arm",
        choices=("arm", "ready"), area="dispatch",
        help_en="Which stamp queue age is measured from: `arm` (CWIST's definition, time the event was "
                "armed) or `ready` (time the reactor first saw the event ready).",
        help_ko="큐 대기 시간을 어느 시각부터 잴지 정한다. `arm`은 이벤트를 등록한 시각(CWIST의 정의), "
                "`ready`는 리액터가 그 이벤트가 준비된 것을 처음 본 시각이다.",
        when_en="When idle keep-alive connections count as aged: under `arm` a connection idle longer "
                "than CWIST_REACTOR_TAIL_US is elevated on its next request though it never waited in "
                "the queue; `ready` counts only the wait after the kernel reported it. Results then no "
                "longer compare with CWIST's.",
        when_ko="유휴 keep-alive 연결이 오래 기다린 것으로 잡힐 때. `arm` 기준에서는 CWIST_REACTOR_TAIL_US보다 오래 쉬던 연결이 큐에서 "
                "기다린 적이 없어도 다음 요청 때 승격된다. `ready`는 커널이 준비를 알린 뒤의 대기만 센다. 대신 결과를 CWIST의 결과와 비교할 수 없게 된다.",
        cwist_invalid_en="CWIST: no such variable; it always measures age from the arm stamp.",
        cwist_invalid_ko="CWIST: 이 변수가 없고, 나이는 언제나 등록 시각부터 잰다.",
    ),
    Knob(
        name="CWIST_REACTOR_ROUND_BUDGET_US", attr="round_budget_us", kind="int", default=2000, lo=0,
        hi=60_000_000, area="dispatch", backends=("io_uring",),
        zero_en="off: re-arms queued during a round are submitted only with the next wait",
        zero_ko="끔: 라운드 중 쌓인 재등록은 다음 대기와 함께만 제출된다",
        help_en="When a round has run longer than this (us), re-arms queued during the round are "
                "submitted at once instead of at round end, and again every this long after that. Default 2000 sits below TAIL_US so a "
                "re-armed event reaches the kernel before it could count as aged.",
        help_ko="라운드가 이 시간(us)보다 오래 돌면, 라운드 중 쌓인 재등록을 라운드 끝까지 기다리지 않고 "
                "바로 제출하고, 그 뒤로도 이 시간마다 다시 제출한다. 기본값 2000은 TAIL_US보다 작아서, 재등록된 이벤트가 오래된 것으로 "
                "취급되기 전에 커널에 도달한다.",
        unit="us",
        when_en="On io_uring, when long rounds hold re-arms back (the probe's queue delay since arm "
                "grows with the batch): lower it to submit them sooner, at one more `io_uring_enter` "
                "per interval; 0 submits only with the next wait, the fewest syscalls.",
        when_ko="io_uring에서 긴 라운드가 재등록을 붙잡고 있을 때(프로브의 등록 이후 큐 지연이 배치 크기와 함께 늘어난다). 낮추면 더 일찍 제출하는 대신 그 "
                "간격마다 `io_uring_enter`를 한 번 더 부른다. 0이면 다음 대기 때만 제출해 시스템 호출이 가장 적다.",
        cwist_invalid_en="CWIST: the variable exists (its commit removing late-round mode keeps it), "
                         "but how it parses values is not recorded.",
        cwist_invalid_ko="CWIST: 변수는 있지만(late-round 모드를 없앤 커밋에서도 남았다) 값을 어떻게 "
                         "파싱하는지는 기록이 없다.",
    ),
    Knob(
        name="CWIST_REACTOR_HARVEST_US", attr="harvest_us", kind="int", default=0, lo=0,
        hi=60_000_000, area="dispatch", backends=("epoll", "io_uring", "selectors"),
        unit="us",
        when_en="Experimental; leave it off. Try it only when the probe's queue delay since ready stays "
                "near a round's length for connections armed long ago although CWIST_REACTOR_TAIL_US is "
                "on: set it below TAIL_US (500-1000) and A/B it with `--workload mixed`. It can lengthen "
                "rounds up to twice (the study measured 17 to 34 ms at the round's p50) for no "
                "measured gain.",
        when_ko="실험용이므로 꺼 둔다. 오래전에 등록된 연결의 준비 이후 큐 지연이 CWIST_REACTOR_TAIL_US를 "
                "켰는데도 라운드 길이 가까이 머물 때만 시도한다. TAIL_US보다 작게(500-1000) 주고 "
                "`--workload mixed`로 A/B 해 본다. 라운드가 최대 두 배까지 길어질 수 있고(연구에서 라운드 "
                "p50이 17 ms에서 34 ms로), 측정된 이득은 없었다.",
        zero_en="off: a round runs only the events its wait returned",
        zero_ko="끔: 라운드는 대기가 돌려준 이벤트만 실행한다",
        help_en="When a round has run this long (us), and again every this long after that, the "
                "reactor takes the events that became ready since its wait, without blocking, and "
                "adds them to the round, stamped ready then: with age-based dispatch on, those already "
                "aged run before every event of the round not yet aged; with it off, after the round's "
                "events. At most as many events as the round's wait returned join one round. io_uring "
                "peeks its completion queue (no system call unless re-arms are queued); epoll and "
                "selectors poll with timeout 0.",
        help_ko="라운드가 이 시간(us)만큼 돌았을 때, 그리고 그 뒤로 이 시간마다, 리액터가 대기 이후에 "
                "준비된 이벤트를 블로킹 없이 가져와 라운드에 더하고, 그 시각을 준비 시각으로 찍는다. 나이 "
                "기반 디스패치가 켜져 있으면 이미 오래된 것은 라운드에서 아직 오래되지 않은 모든 이벤트보다 "
                "먼저 돌고, 꺼져 있으면 라운드의 이벤트 뒤에 돈다. 한 라운드에 더해지는 이벤트는 그 라운드의 "
                "대기가 돌려준 수를 넘지 않는다. io_uring은 완료 큐를 들여다보고(쌓인 재등록이 없으면 시스템 "
                "호출 없음), epoll과 selectors는 타임아웃 0으로 폴링한다.",
        cwist_invalid_en="CWIST: no such variable; a round runs only the batch its wait returned.",
        cwist_invalid_ko="CWIST: 이 변수가 없고, 라운드는 대기가 돌려준 배치만 실행한다.",
    ),
    Knob(
        name="CWIST_REACTOR_DRAIN_CHUNK", attr="drain_chunk", kind="int", default=8, lo=0, hi=1_000_000,
        area="dispatch",
        zero_en="posts are drained only at round start",
        zero_ko="포스트는 라운드 시작 때만 비운다",
        help_en="Inside a long batch, run queued posts every N callbacks so a cross-thread post does "
                "not wait for the whole batch. 8 is CWIST's default-profile value.",
        help_ko="긴 배치 안에서 콜백 N개마다 쌓인 포스트를 실행해, 다른 스레드가 보낸 포스트가 배치 전체를 "
                "기다리지 않게 한다. 8은 CWIST 기본 프로필의 값이다.",
        unit="callbacks",
        when_en="When posts from other threads (`Reactor.post`) wait behind long batches (the probe's "
                "post delay is high): lower it, at one look at the post queue every N callbacks; 0 "
                "drains only at round start.",
        when_ko="다른 스레드가 보낸 포스트(`Reactor.post`)가 긴 배치 뒤에서 기다릴 때(프로브의 포스트 지연이 높다). 낮추면 콜백 N개마다 포스트 큐를 한 "
                "번 더 들여다본다. 0이면 라운드 시작 때만 비운다.",
        cwist_invalid_en="CWIST: invalid values give 64; io_uring only.",
        cwist_invalid_ko="CWIST: 잘못된 값이면 64가 되고, io_uring에서만 동작한다.",
    ),
    Knob(
        name="CWIST_RX_URING", attr="rx_uring", kind="choice", default="auto", choices=("auto", "1", "0"),
        area="backend", backends=("io_uring",),
        help_en="`auto` or `1`: where the backend has a receive operation (io_uring), the HTTP server "
                "arms an `IORING_OP_RECV` instead of a readiness poll, and its completion is the "
                "readiness and the data at once: no `recv` call per request. `0`: readiness plus "
                "`recv` on every backend. Backends without one (epoll) always use readiness.",
        help_ko="`auto` 또는 `1`: 백엔드에 수신 연산이 있으면(io_uring) HTTP 서버가 준비 상태 폴링 대신 "
                "`IORING_OP_RECV`를 등록하고, 그 완료가 준비 신호이자 데이터가 된다. 그래서 요청마다 "
                "`recv`를 부르지 않는다. `0`: 모든 백엔드에서 준비 상태 확인 뒤 `recv`를 부른다. 수신 연산이 "
                "없는 백엔드(epoll)는 언제나 준비 상태 방식을 쓴다.",
        when_en="To compare the receive path with readiness plus `recv` on io_uring: `0` against "
                "`auto`. `1` is `auto` plus a start-up warning where the backend has no receive "
                "operation.",
        when_ko="io_uring에서 수신 경로와 준비 상태 확인 뒤 `recv` 방식을 비교할 때: `0`과 `auto`를 견준다. `1`은 `auto`에 더해, 백엔드에 "
                "수신 연산이 없으면 시작할 때 경고를 남길 뿐이다.",
        cwist_invalid_en="CWIST: default auto; `0` forces the poll path and any other value tries "
                         "RECV; a RECV that fails with -EAGAIN falls back to poll for that connection.",
        cwist_invalid_ko="CWIST: 기본값은 auto다. `0`이면 폴링 경로를 강제하고, 그 밖의 값은 RECV를 "
                         "시도한다. RECV가 -EAGAIN으로 실패하면 그 연결은 폴링으로 돌아간다.",
    ),
    Knob(
        name="CWIST_LATENCY_PROBE", attr="latency_probe", kind="bool", default=False, area="probe",
        help_en="1 records queue delay, service time, post delay, batch size and round time into "
                "HdrHistograms per reactor and reports them at shutdown.",
        help_ko="1이면 리액터마다 큐 지연, 서비스 시간, 포스트 지연, 배치 크기, 라운드 시간을 "
                "HdrHistogram에 기록하고 종료할 때 보고한다.",
        when_en="When you need to know where the time goes (queue delay or service time); every "
                "callback then reads the clock more, so compare probe runs only with probe runs.",
        when_ko="시간이 어디에 쓰이는지(큐 지연인지 서비스 시간인지) 알아야 할 때. 켜면 콜백마다 시계를 더 읽으므로, 프로브를 켠 실행은 프로브를 켠 실행끼리만 "
                "비교한다.",
        cwist_invalid_en="CWIST: only the exact value 1 enables it; anything else is off.",
        cwist_invalid_ko="CWIST: 정확히 1일 때만 켜지고 그 밖의 값은 모두 끔이다.",
    ),
    Knob(
        name="CWIST_LATENCY_PROBE_FILE", attr="latency_probe_file", kind="path", default=None,
        area="probe",
        help_en="With CWIST_LATENCY_PROBE=1, each worker also writes its probe as JSON here at shutdown "
                "(HdrHistogram base64 histograms plus plain percentiles). `{pid}` and `{worker}` are "
                "replaced; a placeholder left out is appended as `.{pid}`/`.{worker}` so workers never "
                "overwrite each other. The directory must exist.",
        help_ko="CWIST_LATENCY_PROBE=1일 때, 각 워커가 종료하면서 프로브 결과를 이 경로에 JSON으로도 "
                "쓴다(HdrHistogram base64 히스토그램과 일반 백분위수). `{pid}`와 `{worker}`는 실제 값으로 "
                "바뀌고, 빠진 자리표시자는 `.{pid}`/`.{worker}`로 끝에 붙여 워커끼리 서로 덮어쓰지 않게 "
                "한다. 디렉터리는 미리 있어야 한다.",
        when_en="When a program reads the probe after shutdown (the tail-latency job's `--probe` sets "
                "it); by hand, stderr is enough.",
        when_ko="종료 뒤에 프로그램이 프로브 결과를 읽을 때(꼬리 지연 작업의 `--probe`가 설정한다). 사람이 볼 때는 stderr로 충분하다.",
        cwist_invalid_en="CWIST: no such variable; its probe reports to stderr only.",
        cwist_invalid_ko="CWIST: 이 변수가 없고, 프로브는 stderr로만 보고한다.",
    ),
    Knob(
        name="CWIST_HTTP_BATCH", attr="http_batch", kind="int", default=16, lo=1, hi=1024, area="http",
        help_en="Most requests one readiness callback serves from a connection's buffered pipeline.",
        help_ko="준비 콜백 하나가 연결의 버퍼에 쌓인 파이프라인에서 처리하는 최대 요청 수.",
        unit="requests",
        when_en="Lower it when one pipelining connection holds the reactor and the others' p99 rises; "
                "raise it when pipelines are long and the cost of each pass (one send, one re-arm or "
                "post) shows in CPU per request.",
        when_ko="파이프라이닝하는 연결 하나가 리액터를 붙잡아 다른 연결의 p99가 오를 때는 낮춘다. 파이프라인이 길고 패스마다 드는 비용(전송 한 번, 재등록이나 "
                "포스트 한 번)이 요청당 CPU에 드러날 때는 올린다.",
        cwist_invalid_en="CWIST: values below 1 give 16; values above 1024 are clamped.",
        cwist_invalid_ko="CWIST: 1보다 작으면 16이 되고, 1024보다 크면 1024로 잘린다.",
    ),
    Knob(
        name="CWIST_HTTP_YIELD_BATCH", attr="http_yield_batch", kind="int", default=None, lo=1, hi=1024,
        area="http", default_text="CWIST_HTTP_BATCH",
        help_en="After this many requests with more still buffered, the handler flushes its output and "
                "posts a continuation so other ready connections run first (skipped while "
                "`dispatch_late()` is true).",
        help_ko="이만큼 처리했는데 버퍼에 요청이 더 남아 있으면, 출력을 내보내고 이어서 처리할 작업을 "
                "포스트해 다른 준비된 연결이 먼저 돌게 한다(`dispatch_late()`가 참이면 건너뛴다).",
        unit="requests",
        when_en="To let other connections in during a long pipeline: set it below CWIST_HTTP_BATCH. "
                "Only then does the late bypass (no yield while `dispatch_late()`) change anything. "
                "Each yield costs a send and a posted continuation.",
        when_ko="긴 파이프라인 도중에 다른 연결을 끼워 주려면 CWIST_HTTP_BATCH보다 작게 준다. 그래야만 늦은 우회(`dispatch_late()`가 참이면 "
                "양보하지 않음)가 무언가를 바꾼다. 양보할 때마다 전송 한 번과 이어서 처리할 작업 포스트 한 번이 든다.",
        cwist_invalid_en="CWIST: values below 1 give the batch value.",
        cwist_invalid_ko="CWIST: 1보다 작으면 배치 값이 된다.",
    ),
    Knob(
        name="CWIST_HTTP_KEEP_ALIVE_TIMEOUT", attr="http_keep_alive_timeout_s", kind="int", default=15,
        lo=0, hi=86_400, area="http",
        zero_en="never close a connection for being idle",
        zero_ko="유휴 연결을 닫지 않음",
        help_en="Seconds a connection may stay silent (no byte received, no output drained) before "
                "the server closes it: gracefully if no request is in progress, with 408 in the middle "
                "of one. Checked on a reactor timer per connection, re-armed lazily.",
        help_ko="연결에 이 시간(초) 동안 아무 입출력이 없으면(받은 바이트도, 내보낸 출력도 없으면) 서버가 "
                "닫는다. 처리 중인 요청이 없으면 우아한 종료(graceful close: 쓰기 쪽을 먼저 닫고 클라이언트가 "
                "닫기를 기다림)로 닫고, 요청을 받는 도중이면 408을 보낸 뒤 닫는다. 연결마다 리액터 타이머 "
                "하나로 확인하며, 타이머는 필요할 때만 다시 건다.",
        unit="s",
        when_en="Lower it when idle connections hold descriptors you need (many clients, a low `ulimit "
                "-n`); raise it, or set 0, when clients pause longer than 15 s between requests and "
                "reconnecting costs them.",
        when_ko="유휴 연결이 필요한 디스크립터를 붙잡고 있을 때(클라이언트가 많거나 `ulimit -n`이 낮을 때)는 낮춘다. 클라이언트가 요청 사이에 15초보다 오래 "
                "쉬고 다시 연결하는 비용이 클 때는 올리거나 0으로 둔다.",
        cwist_invalid_en="CWIST: anything but a positive integer gives 15; it checks the idle time only "
                         "when the connection's next event arrives, not on a timer.",
        cwist_invalid_ko="CWIST: 양의 정수가 아니면 15가 된다. 유휴 시간은 타이머가 아니라 그 연결에 다음 "
                         "이벤트가 올 때만 확인한다.",
    ),
    Knob(
        name="CWIST_WORKERS", attr="workers", kind="int", default=1, lo=1, hi=1024, area="workers",
        help_en="Number of server processes sharing the port with SO_REUSEPORT, each with its own reactor.",
        help_ko="SO_REUSEPORT로 포트를 함께 쓰는 서버 프로세스 수. 프로세스마다 리액터가 따로 있다.",
        unit="processes",
        when_en="When one server process saturates its core: one worker per core you can give the "
                "server. The kernel spreads connections over them with SO_REUSEPORT, unevenly when "
                "there are few connections.",
        when_ko="서버 프로세스 하나가 코어 하나를 다 쓸 때. 서버에 내줄 수 있는 코어마다 워커 하나를 둔다. 커널이 SO_REUSEPORT로 연결을 나눠 주는데, "
                "연결이 적으면 고르지 않다.",
        cwist_invalid_en="CWIST: its README gives 1 as the default; how it treats an invalid value is "
                         "not recorded.",
        cwist_invalid_ko="CWIST: README 표의 기본값은 1이다. 잘못된 값을 어떻게 처리하는지는 기록이 없다.",
    ),
    Knob(
        name="CWIST_BENCH_DELAY_US", attr="bench_delay_us", kind="int", default=0, lo=0, hi=1_000_000,
        area="bench", test_only=True,
        zero_en="no injected delay",
        zero_ko="지연을 넣지 않음",
        help_en="The bench server busy-waits this many microseconds per request served, an "
                "injected slowdown for the tail-latency job's control arm (it must show as a regression).",
        help_ko="벤치 서버가 요청 하나를 처리할 때마다 이 시간(us)만큼 바쁜 대기를 한다. "
                "꼬리 지연 작업의 대조군에 일부러 넣는 지연이며, 결과에 회귀로 나타나야 한다.",
        unit="us",
        when_en="Never for a real measurement: only to check that the tail-latency job detects a "
                "slowdown it was given (its control).",
        when_ko="실제 측정에는 절대 쓰지 않는다. 꼬리 지연 작업이 일부러 넣은 느려짐을 잡아내는지 확인할 때(대조 실험)만 쓴다.",
        cwist_invalid_en="CWIST: no such variable.",
        cwist_invalid_ko="CWIST: 이 변수가 없다.",
    ),
    Knob(
        name="CWIST_BENCH_SLOW_US", attr="bench_slow_us", kind="int", default=0, lo=0, hi=1_000_000,
        area="bench", test_only=True,
        zero_en="/slow/:id is as fast as /user/:id",
        zero_ko="/slow/:id도 /user/:id만큼 빠름",
        help_en="The bench server busy-waits this many microseconds for each `GET /slow/:id` it serves "
                "(answered like `/user/:id`): the slow route of the tail-latency job's slow-route workload.",
        help_ko="벤치 서버가 `GET /slow/:id`를 처리할 때마다 이 시간(us)만큼 바쁜 대기를 한다(응답은 "
                "`/user/:id`와 같다). 꼬리 지연 작업의 slow-route 워크로드가 쓰는 느린 경로다.",
        unit="us",
        when_en="Never for a real measurement: only for the tail-latency job's slow-route workload, "
                "which needs some requests slower than the rest.",
        when_ko="실제 측정에는 절대 쓰지 않는다. 일부 요청이 나머지보다 느려야 하는 꼬리 지연 작업의 slow-route 부하에만 쓴다.",
        cwist_invalid_en="CWIST: no such variable.",
        cwist_invalid_ko="CWIST: 이 변수가 없다.",
    ),
    Knob(
        name="CWIST_BENCH_STALL_US", attr="bench_stall_us", kind="int", default=0, lo=0, hi=1_000_000,
        area="bench", test_only=True,
        zero_en="no stall",
        zero_ko="멈춤 없음",
        help_en="With CWIST_BENCH_STALL_EVERY_MS, the bench server busy-waits this many microseconds "
                "once per period on a reactor timer, blocking every connection at once: a stall "
                "that open-loop load must see in the requests scheduled during it.",
        help_ko="CWIST_BENCH_STALL_EVERY_MS와 함께 쓰면, 벤치 서버가 리액터 타이머로 주기마다 한 번 이 "
                "시간(us)만큼 바쁜 대기를 해서 모든 연결을 한꺼번에 막는다. 개루프 부하라면 그동안 "
                "보내기로 예정된 요청에서 이 멈춤이 보여야 한다.",
        unit="us",
        when_en="Never for a real measurement: only to check that open-loop load sees a stall that "
                "closed-loop load hides (coordinated omission).",
        when_ko="실제 측정에는 절대 쓰지 않는다. 폐루프 부하가 감추는 멈춤을 개루프 부하는 보는지(coordinated omission) 확인할 때만 쓴다.",
        cwist_invalid_en="CWIST: no such variable.",
        cwist_invalid_ko="CWIST: 이 변수가 없다.",
    ),
    Knob(
        name="CWIST_BENCH_STALL_EVERY_MS", attr="bench_stall_every_ms", kind="int", default=0, lo=0,
        hi=3_600_000, area="bench", test_only=True,
        zero_en="no stall",
        zero_ko="멈춤 없음",
        help_en="Period of the CWIST_BENCH_STALL_US stall, in milliseconds from one stall's start to "
                "the next's; a stall longer than the period makes every round start with one.",
        help_ko="CWIST_BENCH_STALL_US 멈춤의 주기(ms). 한 멈춤의 시작부터 다음 멈춤의 시작까지를 잰다. "
                "멈춤이 주기보다 길면 라운드마다 멈춤으로 시작한다.",
        unit="ms",
        when_en="With CWIST_BENCH_STALL_US only: how often the injected stall comes.",
        when_ko="CWIST_BENCH_STALL_US와 함께일 때만: 일부러 넣는 멈춤이 얼마나 자주 오는지 정한다.",
        cwist_invalid_en="CWIST: no such variable.",
        cwist_invalid_ko="CWIST: 이 변수가 없다.",
    ),
)

_BY_NAME = {k.name: k for k in KNOBS}


def knob(name: str) -> Knob:
    """Return the registry row for ``name``; ``KeyError`` if it is not a known knob."""
    return _BY_NAME[name]


_BY_ATTR = {k.attr: k for k in KNOBS}
_TYPES = {"int": int, "choice": str, "bool": bool, "path": "str | None"}


class _ConfigMethods:
    """Parsed knob values, one attribute per :attr:`Knob.attr`, in registry order.

    Build with :func:`load` (from an environment mapping) or :meth:`Config.default`.
    Times are in microseconds (``*_us``) as in CWIST.  ``source`` holds the
    variables the environment set.  The class is made from :data:`KNOBS`
    (below), so its fields and defaults are the registry's.
    """

    @classmethod
    def default(cls) -> "Config":
        return load({})

    def replace(self, **changes: Any) -> "Config":
        """A copy with some attributes changed, each checked as :func:`load` checks it.

        Raises :class:`ConfigError` for a value ``load`` would not give (the
        probe file's directory is checked when a probe opens it, not here)
        and ``TypeError`` for a name that is not an attribute.
        """
        unknown = sorted(set(changes) - set(_BY_ATTR))
        if unknown:
            raise TypeError(f"Config has no attribute {', '.join(unknown)}; "
                            f"accepted: {', '.join(_BY_ATTR)}")
        values = {attr: getattr(self, attr) for attr in _BY_ATTR}
        for attr, value in changes.items():
            values[attr] = _BY_ATTR[attr].check(value)
        return Config(source=self.source, **_derived(values))


Config = make_dataclass(
    "Config",
    [(k.attr, _TYPES[k.kind], field(default=k.default)) for k in KNOBS]
    + [("source", Mapping[str, str], field(default_factory=dict, compare=False, repr=False))],
    bases=(_ConfigMethods,), frozen=True,
    namespace={"__module__": __name__, "__doc__": _ConfigMethods.__doc__})


def _derived(values: dict[str, Any]) -> dict[str, Any]:
    """Fill the knobs whose default is derived: ``CWIST_HTTP_YIELD_BATCH`` follows the batch."""
    if values["http_yield_batch"] is None:
        values["http_yield_batch"] = values["http_batch"]
    return values


def load(env: Mapping[str, str] | None = None) -> Config:
    """Parse every knob from ``env`` (default ``os.environ``).

    Returns a :class:`Config`.  Raises :class:`ConfigError` for the first
    invalid value, in registry order.  Unset or empty variables take their
    default; ``CWIST_HTTP_YIELD_BATCH`` defaults to the parsed batch value.
    """
    env = os.environ if env is None else env
    values: dict[str, Any] = {}
    used: dict[str, str] = {}
    for k in KNOBS:
        raw = env.get(k.name)
        if raw is None or raw.strip() == "":
            values[k.attr] = k.default
        else:
            values[k.attr] = k.parse(raw)
            used[k.name] = raw
    _derived(values)
    if values["latency_probe"] and values["latency_probe_file"] is not None:
        check_probe_file(values["latency_probe_file"], range(values["workers"]))
    return Config(source=used, **values)


def warnings(env: Mapping[str, str] | None = None) -> list[str]:
    """Settings in ``env`` (default ``os.environ``) that are valid but do nothing; one line each.

    A ``CWIST_*`` name that is not a knob but close to one (a typo) is named
    with the knob it resembles.  Other unknown ``CWIST_*`` names are CWIST's
    own settings sharing the environment (``CWIST_POOL_SHARDS`` ...) and are
    left alone, as CWIST leaves ours.  The server logs these at start.
    """
    import difflib

    env = os.environ if env is None else env
    out = []
    for name in sorted(n for n in env if n.startswith("CWIST_") and n not in _BY_NAME):
        near = difflib.get_close_matches(name, _BY_NAME, n=1, cutoff=0.85)
        if near:
            out.append(f"{name} is not a setting of the reference and is ignored; did you mean {near[0]}?")
    if (env.get("CWIST_LATENCY_PROBE_FILE") or "").strip() and (env.get("CWIST_LATENCY_PROBE") or "").strip() != "1":
        out.append("CWIST_LATENCY_PROBE_FILE is set but CWIST_LATENCY_PROBE is not 1: "
                   "no probe runs and no probe file is written")
    return out


def probe_file_path(template: str, pid: int, worker: int) -> str:
    """The file one worker writes for ``CWIST_LATENCY_PROBE_FILE=template``.

    ``{pid}`` and ``{worker}`` are replaced; a placeholder the template lacks
    is appended (``.{pid}`` then ``.{worker}``), so workers -- forked
    processes or reactors in one process -- never overwrite each other.
    """
    path = template.replace("{pid}", str(pid)).replace("{worker}", str(worker))
    if "{pid}" not in template:
        path += f".{pid}"
    if "{worker}" not in template:
        path += f".{worker}"
    return path


def check_probe_file(template: str, workers) -> None:
    """Raise :class:`ConfigError` unless each worker in ``workers`` (indexes) can write its probe file.

    ``load()`` checks every worker, before the server forks them, so a bad
    path is one line and exit status 2, not a traceback per worker; each
    worker's ``LatencyProbe`` checks its own again when it starts.
    """
    name = "CWIST_LATENCY_PROBE_FILE"
    if template.endswith(os.sep):
        raise ConfigError(name, template, "a file path, not a directory (each worker would write a "
                                          "hidden .<pid>.<worker> file in it)")
    for worker in workers:
        folder = os.path.dirname(probe_file_path(template, os.getpid(), worker)) or "."
        if not (os.path.isdir(folder) and os.access(folder, os.W_OK)):
            raise ConfigError(name, template, f"a path in an existing, writable directory "
                                              f"({folder!r}, worker {worker}'s, is not)")
