"""Test session wiring: one real Kafka broker per session, unique names per test.

The broker (fixture ``kafka_broker``) is chosen in this order:

1. ``KAFKA_BOOTSTRAP_SERVERS`` when set (``make test`` sets it to the broker it started);
2. testcontainers' Kafka module (Confluent's cp-kafka 8.x image = Apache Kafka 4.x, KRaft)
   when a Docker engine answers a ping — not merely when a ``docker`` binary exists;
3. otherwise ``parsley-devbroker`` (``devtools.devbroker.up``) in a temporary
   directory, stopped and removed at the end of the session (``PARSLEY_KEEP_BROKER=1``
   keeps the directory and its ``logs/server.log`` for a post-mortem).

Whatever its source, the broker is waited for (AdminClient answers) and warmed up
(group and transaction coordinators loaded) before the first test uses it.

Two more session brokers start only when a test asks for them (``devtools/dev_cluster.py``,
``parsley-devbroker`` in a temporary directory, whatever the source of the first):
``kafka_cluster``, a 3-broker KRaft cluster (replication 3, ``min.insync.replicas`` 2), and
``secured_broker``, one broker with ``--security sasl_ssl`` (TLS, SCRAM, ACLs enforced). A
test that stops, kills or freezes a broker of either heals it before it ends
(``DevCluster.heal``). Tests that stop, restart or freeze a single broker share a third,
``private_kafka`` (``devtools/private_broker.py``), handed to each running and warmed.

Only tests that use a broker fixture, or carry ``@pytest.mark.broker``, start one:
pure unit tests run without Java or Kafka. A test that needs the broker and cannot
get one fails (it is never skipped); under ``CI=true`` any skipped test also fails
the session.

Fixtures (see each docstring): ``kafka_broker``, ``kafka_bootstrap``, ``kafka_admin``,
``unique_names``, ``topic_name``, ``group_id``, ``transactional_id``, ``create_topic``,
``kafka_cluster``, ``secured_broker``, ``private_kafka``. Helpers for code outside fixtures
live in ``devtools/kafka_support.py``.

Phases (README.md, "Run the tests"): ``--phase parallel`` keeps the tests not marked
``serial`` (``make test`` runs them under pytest-xdist, every worker on the one broker of
``KAFKA_BOOTSTRAP_SERVERS``), ``--phase serial`` keeps those marked ``serial`` (run after, in
three lanes of one test at a time: two halves of the private broker's tests, each half on
a private broker of its own, and the timing-sensitive tests on the shared broker) but the
cluster's and those marked ``load``, which ``--phase load`` keeps (run last, in two
lanes of one test at a time: the cluster's, and the other load tests). The
``sasl_ssl`` broker's tests run in the parallel phase, all on one worker. Without
``--phase`` every test runs.

The inner loop, ``pytest -m "not slow"``, leaves out the tests marked ``slow`` (each took
1 s or more in the parallel phase) and every serial test, which this module marks ``slow``
itself. A run given no ``--basetemp`` gets a short one under ``/tmp/pt-<uid>/`` (removed
when the run passes; a failed run's is kept, pruned as pytest prunes its own): a
coordinator's ``ipc://`` control socket lives in the test's directory, and pytest's
default directory is too long for the 107 bytes such a path may have.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from devtools import private_broker
from devtools.dev_cluster import DevCluster
from devtools.kafka_support import QUIET, CreateTopic, TopicInfo, UniqueNames
from devtools.kafka_support import create_topic as _create_topic
from devtools.private_broker import PrivateBroker
from parsley import wire
from parsley.engine import state_codec
from tests.codec_impls import ALL as ALL_CODECS
from tests.codec_impls import STATE_FUNCTIONS, WIRE_FUNCTIONS, Codecs
from tests.engines import ENGINES, engine_cls, set_current

ENV_BOOTSTRAP = "KAFKA_BOOTSTRAP_SERVERS"
TESTCONTAINERS_IMAGE = "confluentinc/cp-kafka:8.0.0"
"""Confluent Platform 8.0 ships Apache Kafka 4.0 (KRaft only)."""

BROKER_FIXTURES = frozenset(
    {"kafka_broker", "kafka_bootstrap", "kafka_admin", "create_topic", "kafka_cluster",
     "secured_broker", "private_kafka"}
)
ON_DEMAND_BROKERS = frozenset({"kafka_cluster", "secured_broker", "private_kafka"})
"""Fixtures whose brokers start when first asked for (3 JVMs for the cluster, one each for
the others). Under pytest-xdist each worker is a session of its own and would start its
own: each fixture's tests are one ``xdist_group``, so one worker runs them all and starts
it once; ``private_kafka``'s are two groups (:data:`PRIVATE_SECOND_LANE`), so two workers
start one each."""
SERIAL_BROKERS = frozenset({"kafka_cluster", "private_kafka"})
"""Of :data:`ON_DEMAND_BROKERS`, those whose tests are also ``serial``: they kill, restart
or freeze brokers and bound the recovery's time, which the parallel phase's load would
stretch; each broker's tests are a lane of their own in the serial phase. The
``secured_broker``'s tests (ACLs: refusals, bounded generously) run in the parallel
phase, on one worker."""
LOAD_LANE = "kafka_cluster"
"""The first ``xdist_group`` of the ``serial`` tests that load the machine: the 3-broker
cluster's (chaos on three brokers). ``--phase load`` runs it and :data:`LOAD_SECOND_LANE`
after the other serial tests: run beside the load tests, the private broker's recovery
tests missed their bounds (a fresh-clone CI run, load average 20-30 on 2 cores). ``make
test`` runs the load phase one test at a time (``LOAD_LANES=1``), or the two groups as
two lanes (``LOAD_LANES=2``: 3:36 where one lane took 5:46, but the cluster's chaos test
met a fenced static member in two of four such runs)."""
PRIVATE_SECOND_LANE = "private_kafka_b"
"""The ``xdist_group`` of the private broker's tests in :data:`PRIVATE_SECOND_MODULES`:
under ``--phase serial`` their worker starts a second private broker, so that the two
halves' outages and restarts overlap (one lane took 6:40 of the phase)."""
PRIVATE_SECOND_MODULES = frozenset({
    "test_coordinator_broker_outage.py", "test_worker_watchdog.py",
    "test_worker_broker_restart.py", "test_group_describe_outage.py"})
"""The modules of the private broker's tests that run in :data:`PRIVATE_SECOND_LANE`;
the others (``test_broker_restart_in_place.py``, ``test_broker_restart_resume.py``,
``test_worker_client_log.py``, ``test_admin_await_bound.py``) run in ``private_kafka``'s
lane. Split by the durations of a fresh-clone CI run: about 185 s and 205 s (and about
15 s since added to the first lane)."""
LOAD_SECOND_LANE = "load"
"""The ``xdist_group`` of the tests marked ``load`` that use no 3-broker cluster (a chaos
harness on a broker of its own, many clients): the load phase's second lane."""
SHARED_SERIAL_GROUP = "shared_serial"
"""The ``xdist_group`` of the other ``serial`` tests that start no broker of
:data:`SERIAL_BROKERS` (they time recoveries on the shared broker, or start their own):
``--phase serial`` runs in three lanes, this group's and the two private brokers', so that
one lane's waits on a killed or frozen broker overlap the others' (``make test``)."""
PHASES = ("parallel", "serial", "load")
"""``--phase`` values: the tests not marked ``serial``; those marked ``serial`` but for
the load lanes' (:data:`LOAD_LANE`, :data:`LOAD_SECOND_LANE`); or only the load lanes'."""


def _ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


@dataclass(frozen=True, slots=True)
class KafkaTestBroker:
    """The session's broker.

    Attributes:
        bootstrap: ``host:port`` for ``bootstrap.servers``.
        source: ``"env"``, ``"testcontainers"`` or ``"devbroker"``.
        log_path: the broker log file when the session started a devbroker, else None.
    """

    bootstrap: str
    source: str
    log_path: Path | None = None


def _docker_engine_answers() -> bool:
    try:
        import docker

        client = docker.from_env(timeout=3)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:  # no engine, no socket, no permission: all mean "no Docker"
        return False


def _start_testcontainer() -> tuple[str, Callable[[], None]]:
    from testcontainers.community.kafka import KafkaContainer

    container = (
        KafkaContainer(TESTCONTAINERS_IMAGE)
        .with_kraft()
        .with_env("KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR", "1")
        .with_env("KAFKA_TRANSACTION_STATE_LOG_MIN_ISR", "1")
        .with_env("KAFKA_GROUP_MIN_SESSION_TIMEOUT_MS", "1000")
        .with_env("KAFKA_AUTO_CREATE_TOPICS_ENABLE", "false")
    )
    container.start(timeout=120)
    return container.get_bootstrap_server(), container.stop


def _no_broker(reason: str) -> None:
    where = " (CI=true: a missing broker fails the run)" if _ci() else ""
    pytest.fail(
        f"no Kafka broker for the tests{where}: {reason}. Set {ENV_BOOTSTRAP}, run a Docker "
        "engine, or install Java 17 and Maven so parsley-devbroker can start one.",
        pytrace=False,
    )


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[KafkaTestBroker]:
    """One real Kafka broker for the whole session, ready for groups and transactions.

    Yields:
        KafkaTestBroker. Fails the requesting test (never skips) when none can be had.
    """
    from devtools import devbroker

    stop: Callable[[], None] | None = None
    broker: KafkaTestBroker
    env = os.environ.get(ENV_BOOTSTRAP, "").strip()
    try:
        if env:
            broker = KafkaTestBroker(env, "env")
        elif _docker_engine_answers():
            bootstrap, stop = _start_testcontainer()
            broker = KafkaTestBroker(bootstrap, "testcontainers")
        else:
            data_dir = Path(tempfile.mkdtemp(prefix="parsley-devbroker-"))

            def stop() -> None:
                keep = bool(os.environ.get("PARSLEY_KEEP_BROKER"))
                devbroker.down(data_dir, keep=keep)
                if not keep:
                    shutil.rmtree(data_dir, ignore_errors=True)

            state, _ = devbroker.up(data_dir, warm=False)
            broker = KafkaTestBroker(state.bootstrap, "devbroker", state.log_path)
        devbroker.wait_ready(broker.bootstrap, timeout_s=120)
        devbroker.warm_up(broker.bootstrap, timeout_s=180)
    except devbroker.DevBrokerError as exc:
        if stop is not None:
            stop()
        failure = str(exc)
    else:
        failure = ""
    if failure:
        _no_broker(failure)
    try:
        yield broker
    finally:
        if stop is not None:
            stop()


def _session_cluster(brokers: int, security: str) -> Iterator[DevCluster]:
    from devtools.dev_cluster import dev_cluster
    from devtools.kafka_jars import DevBrokerError

    try:
        with dev_cluster(brokers, security=security) as cluster:
            yield cluster
            return
    except DevBrokerError as exc:
        failure = str(exc)
    _no_broker(failure)


@pytest.fixture(scope="session")
def kafka_cluster() -> Iterator[DevCluster]:
    """A 3-broker KRaft cluster on the loopback for the whole session (started when first
    asked for): replication 3, ``min.insync.replicas`` 2 for internal and created topics.

    A test that stops, kills or freezes one of its brokers calls ``kafka_cluster.heal()``
    before it ends (in a ``finally``), so the next test finds all three in sync.
    """
    yield from _session_cluster(3, "plaintext")


@pytest.fixture(scope="session")
def secured_broker() -> Iterator[DevCluster]:
    """One ``sasl_ssl`` broker for the whole session (started when first asked for):
    TLS, SASL/SCRAM-SHA-512, ``StandardAuthorizer`` with no ACL meaning no access, super
    user ``admin`` (``secured_broker.client``); ``secured_broker.create_user(name)``
    makes a SCRAM user."""
    yield from _session_cluster(1, "sasl_ssl")


@pytest.fixture(scope="session")
def kafka_bootstrap(kafka_broker: KafkaTestBroker) -> str:
    """``host:port`` of the session's broker, for ``bootstrap.servers``."""
    return kafka_broker.bootstrap


@pytest.fixture(scope="session")
def kafka_admin(kafka_bootstrap: str) -> AdminClient:
    """An AdminClient on the session's broker (shared; do not close)."""
    return AdminClient({"bootstrap.servers": kafka_bootstrap, **QUIET})


@pytest.fixture
def unique_names(request: pytest.FixtureRequest) -> UniqueNames:
    """A :class:`UniqueNames` factory for this test."""
    return UniqueNames(request.node.name)


@pytest.fixture
def topic_name(unique_names: UniqueNames) -> str:
    """A topic name unique to this test (the topic is not created)."""
    return unique_names.topic()


@pytest.fixture
def group_id(unique_names: UniqueNames) -> str:
    """A consumer group id unique to this test."""
    return unique_names.group()


@pytest.fixture
def transactional_id(unique_names: UniqueNames) -> str:
    """A ``transactional.id`` unique to this test."""
    return unique_names.transactional_id()


@pytest.fixture
def create_topic(kafka_admin: AdminClient, unique_names: UniqueNames) -> Iterator[CreateTopic]:
    """Create topics on the session broker and wait until they are served.

    Call as ``create_topic(name=None, *, partitions=1, config=None, timeout_s=30.0)``;
    returns a ``TopicInfo(name, topic_id, partitions)``. With ``name=None`` a unique
    name is made. Topics created through it are deleted (without waiting) after the test.
    """
    created: list[str] = []

    def make(
        name: str | None = None,
        *,
        partitions: int = 1,
        config: Mapping[str, str] | None = None,
        timeout_s: float = 30.0,
    ) -> TopicInfo:
        topic = name or unique_names.topic()
        info = _create_topic(
            kafka_admin, topic, partitions=partitions, config=config, timeout_s=timeout_s
        )
        created.append(topic)
        return info

    yield make
    if created:
        kafka_admin.delete_topics(created, request_timeout=30)


@pytest.fixture(scope="session")
def _private_kafka_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The private broker's data directory; the broker is stopped and the directory removed
    at the end of the session."""
    from devtools import devbroker

    data_dir = tmp_path_factory.mktemp("private-kafka") / "broker"
    try:
        yield data_dir
    finally:
        private_broker.thaw(data_dir)
        devbroker.down(data_dir)


@pytest.fixture
def private_kafka(_private_kafka_dir: Path) -> Iterator[PrivateBroker]:
    """A private dev broker that this test may stop, restart (same port and data) or freeze.

    One broker serves every such test of the session (of an xdist worker: one per lane,
    :data:`PRIVATE_SECOND_LANE`; one JVM start, not one per test;
    the shared broker of ``kafka_broker`` is never stopped). It is running and warmed when
    the test starts, whatever an earlier test left (``devtools.private_broker.ready``), and
    thawed after the test. Topics of earlier tests remain: use unique names.

    Yields:
        ``devtools.private_broker.PrivateBroker`` (``data_dir``, ``state``, ``bootstrap``).
    """
    broker = private_broker.ready(_private_kafka_dir)
    try:
        yield broker
    finally:
        private_broker.thaw(_private_kafka_dir)


@pytest.fixture(autouse=True)
def _broker_for_marked_tests(request: pytest.FixtureRequest) -> None:
    """Tests marked ``@pytest.mark.broker`` get the session broker even if they name no fixture."""
    if request.node.get_closest_marker("broker") is not None:
        request.getfixturevalue("kafka_broker")


KEPT_BASETEMPS = 3
"""Short ``--basetemp`` directories kept under ``/tmp/pt-<uid>/`` (failed runs'), as
pytest keeps its last three; an older one is removed once it is an hour old (a run still
going may own it)."""

_SHORT_BASETEMP = pytest.StashKey[Path]()
_SESSION_STATUS = pytest.StashKey[int]()


def pytest_configure(config: pytest.Config) -> None:
    """Give a run with no ``--basetemp`` a short one (module docstring): pytest's default,
    ``/tmp/pytest-of-<user>/pytest-<n>/popen-gw<k>/<test>/``, leaves a coordinator's
    control socket path over the 107 bytes ``ipc://`` allows. xdist's workers inherit it.
    Older directories there are pruned to the newest :data:`KEPT_BASETEMPS`."""
    if config.option.basetemp or hasattr(config, "workerinput"):
        return
    root = Path("/tmp") / f"pt-{os.getuid()}"
    root.mkdir(mode=0o700, exist_ok=True)
    if root.is_symlink() or root.stat().st_uid != os.getuid():
        raise pytest.UsageError(f"{root} is not this user's directory: give --basetemp")
    older = sorted(root.iterdir(), key=lambda p: p.stat().st_mtime, reverse=True)
    for stale in older[KEPT_BASETEMPS - 1:]:
        if time.time() - stale.stat().st_mtime > 3600:
            shutil.rmtree(stale, ignore_errors=True)
    basetemp = Path(tempfile.mkdtemp(prefix="", dir=root))
    config.option.basetemp = str(basetemp)
    config.stash[_SHORT_BASETEMP] = basetemp


def pytest_unconfigure(config: pytest.Config) -> None:
    """Remove the short ``--basetemp`` of :func:`pytest_configure` after a run that passed
    (a failed run keeps its directories to look at)."""
    basetemp = config.stash.get(_SHORT_BASETEMP, None)
    if basetemp is None or not basetemp.is_dir():
        return
    if config.stash.get(_SESSION_STATUS, None) == 0 or not any(basetemp.iterdir()):
        shutil.rmtree(basetemp, ignore_errors=True)


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--phase parallel|serial|load``: which of ``make test``'s three runs this is
    (module docstring)."""
    parser.addoption(
        "--phase", choices=PHASES, default=None,
        help="parallel: only tests not marked serial (for pytest-xdist); serial: only tests "
             "marked serial, but the 3-broker cluster's and those marked load; load: only "
             "those. Default: every test.",
    )


@pytest.hookimpl(tryfirst=True)  # before the phase filter below and xdist's own hook
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test that uses a broker fixture ``broker``, so ``-m "not broker"`` works,
    every test of a broker started on demand in its ``xdist_group`` (:data:`ON_DEMAND_BROKERS`)
    and ``serial`` where :data:`SERIAL_BROKERS` says; with
    ``--phase``, deselect the other phase's tests."""
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        if BROKER_FIXTURES & used:
            item.add_marker(pytest.mark.broker)
        if SERIAL_BROKERS & used:
            item.add_marker(pytest.mark.serial)
        groups = sorted(ON_DEMAND_BROKERS & used)
        for fixture in groups:
            # A plain "pytest -n N" (no --phase) still starts each on one worker only
            # (the private broker: one per half).
            if fixture == "private_kafka" and item.path.name in PRIVATE_SECOND_MODULES:
                fixture = PRIVATE_SECOND_LANE
            item.add_marker(pytest.mark.xdist_group(fixture))
        if not groups and item.get_closest_marker("serial") is not None:
            lane = LOAD_SECOND_LANE if item.get_closest_marker("load") else SHARED_SERIAL_GROUP
            item.add_marker(pytest.mark.xdist_group(lane))
        if item.get_closest_marker("serial") is not None:
            item.add_marker(pytest.mark.slow)  # the inner loop never waits on a serial lane
    phase = config.getoption("phase")
    if phase is None:
        return
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        (kept if _phase_of(item) == phase else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def _phase_of(item: pytest.Item) -> str:
    """The ``--phase`` that runs ``item``, once :func:`pytest_collection_modifyitems` has
    marked it: ``parallel``, ``serial`` or ``load`` (:data:`PHASES`)."""
    if item.get_closest_marker("serial") is None:
        return "parallel"
    lanes = {m.args[0] for m in item.iter_markers("xdist_group") if m.args}
    return "load" if lanes & {LOAD_LANE, LOAD_SECOND_LANE} else "serial"


@pytest.fixture(params=[c.name for c in ALL_CODECS])
def codecs(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Codecs:
    """Run the test once per codec implementation (the Python reference, and the Rust
    codec when built): ``parsley.wire``'s and ``parsley.engine.state_codec``'s public codec
    functions are that implementation's for the test's duration. Use with
    ``pytestmark = pytest.mark.usefixtures("codecs")``; returns the implementation."""
    chosen = next(c for c in ALL_CODECS if c.name == request.param)
    for name in WIRE_FUNCTIONS:
        monkeypatch.setattr(wire, name, getattr(chosen, name))
    for name in STATE_FUNCTIONS:
        monkeypatch.setattr(state_codec, name, getattr(chosen, name))
    return chosen


_SKIPPED: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Record skips (not xfails) so CI can refuse them."""
    if report.skipped and not hasattr(report, "wasxfail"):
        _SKIPPED.append(report.nodeid)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Under ``CI=true`` a skipped test fails the run (never a skip: README.md, "Run the tests")."""
    if _ci() and _SKIPPED and exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    session.config.stash[_SESSION_STATUS] = int(session.exitstatus)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Say why CI failed a run whose tests all passed."""
    if _ci() and _SKIPPED:
        terminalreporter.write_line(
            f"CI=true: {len(_SKIPPED)} skipped test(s) fail the run: " + ", ".join(_SKIPPED[:10]),
            red=True,
        )


@pytest.fixture(scope="module", params=ENGINES)
def engine_impl(request: pytest.FixtureRequest) -> Iterator[str]:
    """Run an engine test module against each engine (``tests/engines.py``).

    Rebinds the module's ``ProcessEngine`` (to the native class for ``native``) and
    ``engine_class`` (sabotage engines of that implementation) and the simulator's default
    engine for the module's tests, and restores them afterwards. Module-scoped, so
    Hypothesis tests may use it.
    """
    import functools

    from parsley.engine import sabotage

    name = request.param
    module = request.module
    saved = {attr: getattr(module, attr) for attr in ("ProcessEngine", "engine_class")
             if hasattr(module, attr)}
    if "ProcessEngine" in saved:
        module.ProcessEngine = engine_cls(name)
    if "engine_class" in saved:
        module.engine_class = functools.partial(sabotage.engine_class, implementation=name)
    previous = set_current(name)
    try:
        yield name
    finally:
        set_current(previous)
        for attr, value in saved.items():
            setattr(module, attr, value)
