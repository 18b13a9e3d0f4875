"""One configuration tree: a TOML file plus ``MONITOR_*`` environment overrides.

pydantic-settings with ``extra="forbid"`` everywhere, so a typo is an error naming its
key rather than a silently ignored setting. Environment variables override the file
(``MONITOR_KAFKA__BOOTSTRAP_SERVERS=...``); secrets are ``SecretStr`` and may come from
the environment or from a ``*_file`` path, so they never need to be in the TOML and are
never printed. Components receive typed values from here, never the settings object.
"""

from __future__ import annotations

import contextlib
import logging
import re
import stat
import tomllib
import urllib.parse
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict
from pydantic_settings.exceptions import SettingsError

from .alerting.slo_budget import VERSIONS_PER_SLO, BudgetShare, allocate_budget
from .durations import format_duration, parse_duration
from .metrics.protocol import ModelParams
from .metrics.registry import (
    LOSSES,
    definition,
    exported_names,
    opt_in_metrics,
    task_losses,
    task_metrics,
)
from .redact import mask_urls
from .state.topics import internal_topics
from .stats.estimation import ESTIMATED_METRICS, MULTICLASS_ESTIMATED_METRICS

__all__ = [
    "ConfigError",
    "Settings",
    "load_settings",
    "redacted",
    "secret_values",
    "settings_from_mapping",
]

Seconds = Annotated[float, BeforeValidator(parse_duration)]
PositiveSeconds = Annotated[Seconds, Field(gt=0)]


def check_secret_file(path: Path | None) -> Path | None:
    """A secret file must be readable and hold a non-blank secret (an empty one would
    fail open); a file others can read is allowed but warned about."""
    if path is None:
        return None
    try:
        text = path.read_text(encoding="utf-8")
        mode = path.stat().st_mode
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"cannot read {path}: {err}") from None
    if not text.strip():
        raise ValueError(f"{path} is empty (only whitespace): an empty secret is not allowed")
    if mode & stat.S_IROTH:
        logging.getLogger("monitor.config").warning(
            "secret file %s is readable by every user (mode %o); chmod 600 it",
            path,
            stat.S_IMODE(mode),
        )
    return path


def not_blank(value: str | SecretStr | None) -> str | SecretStr | None:
    """A credential that is set must not be empty or whitespace: an empty user or secret
    would make authentication fail open (or send blank credentials)."""
    if value is None:
        return None
    text = value.get_secret_value() if isinstance(value, SecretStr) else value
    if not text.strip():
        raise ValueError("is empty: an empty credential is refused (unset the key instead)")
    return value


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class KafkaSettings(_Section):
    # which client library consumes (docs/kafka.md): the pure-Python kafka-python, or
    # confluent-kafka (librdkafka, `pip install 'model-monitor[fast]'`), ~3× faster
    client: Literal["kafka-python", "confluent"] = "kafka-python"
    bootstrap_servers: str = "127.0.0.1:9092"
    predictions_topic: str = "predictions"
    labels_topic: str = "labels"
    group_id: str = "model-monitor"
    client_id: str = "model-monitor"
    dead_letter_topic: str | None = None
    auto_offset_reset: Literal["earliest", "latest"] = "earliest"
    max_poll_records: int = Field(20_000, ge=1, le=200_000)
    max_partition_fetch_bytes: int = Field(8 * 1024 * 1024, ge=1024)
    fetch_max_bytes: int = Field(64 * 1024 * 1024, ge=1024)
    # how long the broker may hold a fetch waiting for data: short keeps the pipeline fed
    fetch_max_wait_ms: int = Field(10, ge=0, le=30_000)
    poll_timeout_ms: int = Field(500, ge=1, le=60_000)
    # failed polls make the daemon not ready only once they persist this long (monotonic)
    poll_error_grace: PositiveSeconds = 5.0
    max_poll_interval_ms: int = Field(300_000, ge=1000)
    session_timeout_ms: int = Field(10_000, ge=1000)
    heartbeat_interval_ms: int = Field(3_000, ge=100)
    reconnect_backoff_max_ms: int = Field(10_000, ge=100)
    # how long one attempt to reach the cluster may block; the daemon retries with its own
    # backoff in between, staying responsive to SIGTERM
    bootstrap_timeout_ms: int = Field(5_000, ge=500)
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"] | None = None
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    sasl_password_file: Path | None = None
    ssl_cafile: Path | None = None
    ssl_certfile: Path | None = None
    ssl_keyfile: Path | None = None
    ssl_password: SecretStr | None = None
    ssl_check_hostname: bool = True
    extra_consumer_config: dict[str, str | int | float | bool] = Field(default_factory=dict)

    @field_validator("sasl_password_file")
    @classmethod
    def _sasl_password_file(cls, v: Path | None) -> Path | None:
        return check_secret_file(v)

    _credentials_not_blank = field_validator("sasl_username", "sasl_password", "ssl_password")(
        not_blank
    )

    @model_validator(mode="after")
    def _no_loop(self) -> KafkaSettings:
        """A dead-letter topic the monitor reads (or keeps its state in) would feed every
        rejected record back to itself, forever."""
        dlq = self.dead_letter_topic
        if dlq is None:
            return self
        if not dlq.strip():
            raise ValueError("dead_letter_topic is empty: unset it to write rejects to a file")
        read = {self.predictions_topic: "predictions_topic", self.labels_topic: "labels_topic"}
        if dlq in read:
            raise ValueError(
                f"dead_letter_topic {dlq!r} is also kafka.{read[dlq]}: every rejected record "
                "would be read again and rejected again, forever; use a topic of its own"
            )
        if dlq in internal_topics(self.group_id):
            raise ValueError(
                f"dead_letter_topic {dlq!r} is one of the monitor's own topics for group "
                f"{self.group_id!r} (state, statistics, exporter lease); use a topic of its own"
            )
        return self

    def resolved_sasl_password(self) -> str | None:
        if self.sasl_password is not None:
            return self.sasl_password.get_secret_value()
        if self.sasl_password_file is not None:
            return self.sasl_password_file.read_text().strip()
        return None


class HttpSettings(_Section):
    host: str = "127.0.0.1"
    port: int = Field(9108, ge=0, le=65535)
    # optional basic auth (password from MONITOR_HTTP__BASIC_AUTH_PASSWORD or a file);
    # /healthz and /readyz stay open for orchestrator probes unless auth_probes is set
    basic_auth_user: str | None = None
    basic_auth_password: SecretStr | None = None
    basic_auth_password_file: Path | None = None
    auth_probes: bool = False
    tls_certfile: Path | None = None  # serve HTTPS when both are set
    tls_keyfile: Path | None = None
    # server bounds (docs/operations.md "Failure modes"): connections kept open at most
    # (the oldest idle one is closed first), threads serving non-probe endpoints and their
    # queue, how long a connection may sit idle, how long a TLS handshake + request head
    # and a response write may take
    max_connections: int = Field(256, ge=1, le=100_000)
    workers: int = Field(4, ge=1, le=256)
    max_queue: int = Field(256, ge=1, le=100_000)
    idle_timeout: PositiveSeconds = 90.0
    request_timeout: PositiveSeconds = 10.0
    write_timeout: PositiveSeconds = 30.0
    # at most this many series in the snapshot part of /metrics (quality, drift,
    # comparisons, SLO states); beyond it the lowest-traffic slices' series are withheld,
    # counted in mlmon_series_dropped_total (docs/operations.md "Cardinality"); unset: no bound
    max_series: int | None = Field(None, ge=100)

    _credentials_not_blank = field_validator("basic_auth_user", "basic_auth_password")(not_blank)

    @field_validator("basic_auth_password_file")
    @classmethod
    def _password_file(cls, v: Path | None) -> Path | None:
        return check_secret_file(v)

    @model_validator(mode="after")
    def _pairs(self) -> HttpSettings:
        if (self.tls_certfile is None) != (self.tls_keyfile is None):
            raise ValueError("set both tls_certfile and tls_keyfile, or neither")
        has_password = self.basic_auth_password is not None or self.basic_auth_password_file
        if (self.basic_auth_user is None) != (not has_password):
            raise ValueError("basic auth needs basic_auth_user and a password (or neither)")
        return self

    def resolved_password(self) -> str | None:
        if self.basic_auth_password is not None:
            return self.basic_auth_password.get_secret_value()
        if self.basic_auth_password_file is not None:
            return self.basic_auth_password_file.read_text().strip()
        return None

    def credentials(self) -> tuple[str, str] | None:
        """(user, password) of basic auth, None when it is off. Fails closed: a user
        whose password resolves empty (a file emptied since validation) raises."""
        if self.basic_auth_user is None:
            return None
        password = self.resolved_password()
        if not self.basic_auth_user.strip() or not password:
            raise ValueError("http basic auth: the user or the password is empty")
        return self.basic_auth_user, password


class StateSettings(_Section):
    dir: Path = Path("./state")
    checkpoint_interval: PositiveSeconds = 30.0
    shutdown_grace: PositiveSeconds = 20.0
    # a checkpoint written for other topics or another group: refuse to start, or start
    # fresh (the old files are moved aside) -- docs/operations.md "Failure modes"
    on_identity_mismatch: Literal["refuse", "reset"] = "refuse"
    # rejected records held on disk while the dead-letter topic is unreachable; above
    # this the consumer pauses (offsets stay behind) until the topic is back
    dead_letter_spill_max_bytes: int = Field(1 << 30, ge=1 << 20)
    # without kafka.dead_letter_topic: the dead-letter file (default <dir>/dead-letter.jsonl),
    # rotated above dead_letter_file_max_bytes into .1, .2, ... keeping
    # dead_letter_file_keep old files: at most (keep + 1) x max bytes on disk
    dead_letter_file: Path | None = None
    dead_letter_file_max_bytes: int = Field(64 << 20, ge=4096)
    dead_letter_file_keep: int = Field(3, ge=0, le=1000)

    @property
    def dead_letter_path(self) -> Path:
        return self.dead_letter_file or self.dir / "dead-letter.jsonl"

    # this deployment is one instance: warn when the consumer group has other members
    single_instance: bool = True
    group_check_interval: PositiveSeconds = 60.0
    # also store every checkpoint in the compacted topic "<group_id>-state" (acknowledged
    # before offsets are committed); a start with an empty dir restores from it, so a
    # replacement instance needs no shared disk (docs/scale-out.md)
    kafka_store: bool = False
    kafka_chunk_bytes: int = Field(512 * 1024, ge=1024, le=8 * 1024 * 1024)


class ScaleSettings(_Section):
    """Scale-out on the consumer-group protocol (docs/scale-out.md)."""

    # single: one engine for every owned partition (one instance per group is correct);
    # partitioned: one engine per owned partition, stored in "<group_id>-state" on
    # revocation and restored on assignment, statistics merged through "<group_id>-stats"
    mode: Literal["single", "partitioned"] = "single"
    # how often each instance publishes its partitions' statistics to the stats topic
    stats_interval: PositiveSeconds = 5.0
    # how long the exporter lease (topic "<group_id>-exporter") outlives its holder's last renewal:
    # the failover time of the global series and SLO alerts; below kafka.session_timeout_ms
    exporter_lease: PositiveSeconds = 3.0
    # a partition none of whose stored states can be restored (garbage, another layout):
    # "pause" keeps it unconsumed (not ready) until one can; "reset" starts it fresh from
    # the group's committed offsets, dropping the history its state held
    on_unusable_state: Literal["pause", "reset"] = "pause"


class LabelFields(_Section):
    id: str = "id"
    ts: str = "ts"
    label: str = "label"


class JoinSettings(_Section):
    label_ttl: PositiveSeconds = 7 * 86400.0
    orphan_label_ttl: PositiveSeconds = 86400.0
    max_pending: int = Field(1_000_000, ge=1)
    max_orphan_labels: int = Field(1_000_000, ge=1)
    label_fields: LabelFields = LabelFields()


class EvaluationSettings(_Section):
    interval: PositiveSeconds = 10.0
    bucket_width: PositiveSeconds = 60.0
    confidence: float = Field(0.95, gt=0.5, lt=1.0)
    clock: Literal["wall", "event"] = "wall"
    max_future_skew: Seconds = 300.0
    max_record_bytes: int = Field(1_048_576, ge=256)
    # wall-clock jumps beyond this (vs the monotonic clock) are ignored until they have
    # held for clock_jump_accept_after (engine/clock.py SteadyClock)
    max_clock_jump: PositiveSeconds = 30.0
    clock_jump_accept_after: PositiveSeconds = 600.0
    # the event-time watermark: this quantile of the last watermark_samples prediction
    # times, never decreasing (engine/clock.py EventWatermark)
    watermark_samples: int = Field(1000, ge=1, le=1_000_000)
    watermark_quantile: float = Field(0.99, gt=0.0, le=1.0)

    @field_validator("bucket_width")
    @classmethod
    def _whole_seconds(cls, v: float) -> float:
        if v < 1 or v != int(v):
            raise ValueError("bucket_width must be a whole number of seconds, at least 1s")
        return v


class FieldMapping(_Section):
    """Where each field lives in a prediction record; dotted paths reach nested keys."""

    id: str = "id"
    ts: str = "ts"
    model: str = "model"
    version: str = "version"
    score: str = "score"
    prediction: str = "prediction"
    segments: str = "segments"
    features: str = "features"
    scores: str = "scores"  # multiclass: {class: probability}
    lower: str = "lower"  # regression: optional prediction interval
    upper: str = "upper"
    items: str = "items"  # ranking: the ranked list (docs/semantics.md, "Ranking records")


class WindowSettings(_Section):
    size: PositiveSeconds
    delay: Seconds = 0.0
    name: str | None = None

    @property
    def label(self) -> str:
        if self.name:
            return self.name
        size = format_duration(self.size)
        return size if self.delay == 0 else f"{size}_delay{format_duration(self.delay)}"


# the task catalogs come from the metric families (monitor/metrics/registry.py)
BINARY_METRICS: tuple[str, ...] = task_metrics("binary")
MULTICLASS_METRICS: tuple[str, ...] = task_metrics("multiclass")
REGRESSION_METRICS: tuple[str, ...] = task_metrics("regression")
# ranking: exported once per `k` value (ndcg_at_10, ...) except mrr (whole list)
RANKING_METRICS: tuple[str, ...] = task_metrics("ranking")
TASK_METRICS: dict[str, tuple[str, ...]] = {
    "binary": BINARY_METRICS,
    "multiclass": MULTICLASS_METRICS,
    "regression": REGRESSION_METRICS,
    "ranking": RANKING_METRICS,
}
# specialist metrics exported only when listed in `metrics` (the registry's opt_in)
OPT_IN_METRICS = opt_in_metrics()
# losses a version comparison can use, per task (docs/comparisons.md)
# (estimated_error_rate: label-free, CBPE, split mode, needs [models.estimation];
# ranking's ndcg_loss: 1 - NDCG@k per query, k = the model's first `k` value)
TASK_LOSSES: dict[str, tuple[str, ...]] = {task: task_losses(task) for task in TASK_METRICS}


class CostSettings(_Section):
    """Value of one prediction per outcome (profit positive, cost negative), any currency."""

    tp: float = 0.0
    fp: float = 0.0
    fn: float = 0.0
    tn: float = 0.0


class EstimationSettings(_Section):
    """Label-free performance estimates (CBPE) of a binary or multiclass model
    (docs/statistics.md)."""

    # the estimate is flagged unreliable when the debiased ECE of the labelled rows (the
    # model version's longest window) exceeds this
    max_ece: float = Field(0.05, gt=0, lt=1)
    # score bins (multiclass: top-label confidence bins) per (version, bucket) of predictions
    bins: int = Field(256, ge=16, le=4096)


class DriftSettings(_Section):
    """Drift of features and scores against a reference profile (docs/drift.md)."""

    @model_validator(mode="after")
    def _one_reference(self) -> DriftSettings:
        if (self.reference is None) == (self.reference_window is None):
            raise ValueError("set exactly one of drift.reference and drift.reference_window")
        if self.reference_window is not None:
            span = parse_duration(self.reference_window.split(":", 1)[1])
            if span <= 0:
                raise ValueError("drift.reference_window needs a positive duration")
        return self

    reference: Path | None = None  # a profile written by `monitor baseline`
    # ... or a past window of live traffic: "first:24h" (the first 24 hours seen) or
    # "previous:7d" (the week before each tested window); bin edges and categories come
    # from the first `bootstrap` predictions
    reference_window: str | None = Field(None, pattern=r"^(first|previous):\S+$")
    bootstrap: int = Field(10_000, ge=100, le=1_000_000)
    max_features: int = Field(100, ge=1, le=10_000)  # live reference: feature names tracked
    features: tuple[str, ...] = ()  # tested features; default: all in the reference
    categorical: tuple[str, ...] = ()  # `monitor baseline`: treat these columns as categories
    windows: tuple[str, ...] = ()  # window names to test; default: all of the model's
    alpha: float = Field(0.05, gt=0.0, lt=0.5)  # the most any one window is tested at
    # P(>= 1 false drift alarm per day) per version and window when nothing drifts: each
    # complete window is tested at min(alpha, budget * size / 1 day) (docs/drift.md)
    false_alarm_budget: float = Field(0.05, gt=0.0, lt=0.5)
    correction: Literal["bh", "bonferroni"] = "bh"
    numeric_effect: float | None = Field(None, gt=0.0)  # quantile Wasserstein, normal SDs
    categorical_effect: float | None = Field(None, gt=0.0)  # JS distance beyond noise
    min_samples: int | None = Field(None, ge=1)
    bins: int = Field(100, ge=10, le=1000)  # `monitor baseline`: equal-mass numeric bins
    max_categories: int = Field(50, ge=2, le=1000)  # `monitor baseline`: top categories kept


class SliceSettings(_Section):
    """A slice: one dimension (``country``) or crossed dimensions (``country``, ``device``)."""

    dimensions: tuple[str, ...] = Field(min_length=1, max_length=4)
    top_k: int = Field(20, ge=1, le=1000)  # most frequent values kept; the rest: __other__
    min_samples: int = Field(100, ge=1)  # labeled samples before a slice is exported


class ModelSettings(_Section):
    name: str = Field(min_length=1)
    task: Literal["binary", "multiclass", "regression", "ranking"] = "binary"
    # binary: two classes; multiclass: every class, in order (ordinal kappas use the order)
    classes: tuple[str, ...] = ("0", "1")
    positive_class: str = "1"  # binary only
    threshold: float = Field(0.5, ge=0.0, le=1.0)  # binary only
    fields: FieldMapping = FieldMapping()
    # default: the task's whole catalog; "fbeta" means one per `fbeta` beta
    metrics: tuple[str, ...] | None = None
    fbeta: tuple[Annotated[float, Field(gt=0)], ...] = (2.0, 0.5)
    score_bins: int = Field(2048, ge=16, le=8192)  # fine score bins: AUC resolution vs memory
    slice_score_bins: int = Field(128, ge=16, le=2048)  # per-slice score bins (binary, slices)
    max_versions: int = Field(20, ge=1, le=10_000)  # live versions; more are rejected
    version_idle_ttl: PositiveSeconds = 7 * 86400.0  # idle versions retire after this
    calibration_bins: int = Field(10, ge=2, le=100)  # multiclass top-label ECE bins
    huber_delta: float = Field(1.0, gt=0)  # regression Huber loss
    quantiles: tuple[Annotated[float, Field(gt=0, lt=1)], ...] = (0.1, 0.5, 0.9)  # pinball
    mase_season: int = Field(1, ge=1)  # regression: seasonal period of MASE's naive forecast
    mase_scale: float | None = Field(None, gt=0)  # regression: MASE scale (else from baseline)
    # binary: fractions of rows (top scores) at which cumulative gain and lift are exported
    gain_fractions: tuple[Annotated[float, Field(gt=0, le=1)], ...] = (0.1, 0.2, 0.5)
    costs: CostSettings | None = None  # threshold economics (binary)
    windows: tuple[WindowSettings, ...] = (WindowSettings(size=3600.0),)
    drift: DriftSettings | None = None
    slices: tuple[SliceSettings, ...] = ()
    # binary, multiclass: estimated_* before labels arrive
    estimation: EstimationSettings | None = None
    # ranking: the cut-offs of the @k metrics, and the longest list (items, relevance,
    # clicked) a record may carry before it is rejected as oversize
    k: tuple[Annotated[int, Field(ge=1, le=10_000)], ...] = (5, 10)
    max_items: int = Field(1000, ge=1, le=100_000)

    @property
    def metric_names(self) -> tuple[str, ...]:
        """The configured metrics, or the task's catalog without the opt-in ones."""
        if self.metrics is not None:
            return self.metrics
        return tuple(m for m in TASK_METRICS[self.task] if m not in OPT_IN_METRICS)

    @model_validator(mode="after")
    def _check(self) -> ModelSettings:
        catalog = TASK_METRICS[self.task]
        unknown = [m for m in self.metric_names if m not in catalog]
        if unknown:
            raise ValueError(
                f"metrics {unknown} are not {self.task} metrics; choose from {list(catalog)}"
            )
        if len(set(self.classes)) != len(self.classes):
            raise ValueError(f"classes must be distinct names, got {list(self.classes)}")
        if self.task == "binary":
            if len(self.classes) != 2:
                raise ValueError("a binary model has exactly two classes")
            if self.positive_class not in self.classes:
                raise ValueError(
                    f"positive_class {self.positive_class!r} is not one of classes "
                    f"{list(self.classes)}"
                )
        elif self.task == "multiclass":
            if not 2 <= len(self.classes) <= 100:
                raise ValueError("a multiclass model needs between 2 and 100 classes")
            if any(not c for c in self.classes):
                raise ValueError("class names must be non-empty")
        if self.task != "binary" and self.costs is not None:
            raise ValueError("costs (threshold economics) apply to binary models only")
        if self.task not in ("binary", "multiclass") and self.estimation is not None:
            raise ValueError("estimation (CBPE) applies to binary and multiclass models only")
        if self.task == "ranking" and (not self.k or len(set(self.k)) != len(self.k)):
            raise ValueError(f"k must list distinct cut-offs, got {list(self.k)}")
        if self.task == "multiclass" and "top_k_accuracy" in self.metric_names:
            if not self.k or len(set(self.k)) != len(self.k):
                raise ValueError(f"k must list distinct cut-offs, got {list(self.k)}")
            if max(self.k) >= len(self.classes):
                raise ValueError(
                    f"k: top_k_accuracy needs cut-offs below the {len(self.classes)} classes "
                    f"(k >= classes is always 1), got {list(self.k)}"
                )
        labels = [w.label for w in self.windows]
        if len(set(labels)) != len(labels):
            raise ValueError(f"window names must be unique, got {labels}")
        if self.drift is not None:
            unknown = [w for w in self.drift.windows if w not in labels]
            if unknown:
                raise ValueError(f"drift.windows {unknown} are not windows of this model {labels}")
        return self


class ComparisonSettings(_Section):
    """A version comparison (A/B, canary or shadow) judged by a sequential test."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.:-]+$")
    model: str
    control: str
    treatment: str
    loss: str = "error_rate"  # one of LOSSES (metrics/registry.py) or a plugin's name
    mode: Literal["split", "shadow"] = "split"
    alpha: float = Field(0.05, gt=0.0, lt=0.5)
    margin: float = Field(0.0, ge=0.0)
    min_samples: int = Field(1000, ge=2)  # burn-in per arm (losses other than error_rate)
    # burn-in in events: expected errors (split error_rate), discordant pairs (shadow
    # error_rate), expected rare-class rows of the smaller arm (binary label losses)
    min_events: float = Field(10.0, ge=0.0)
    horizon: int = Field(10_000, ge=2)
    traffic_split: tuple[float, float] = (0.5, 0.5)
    srm_threshold: float = Field(0.001, gt=0.0, lt=0.5)
    stale_after: PositiveSeconds = 900.0
    # auto: exact conditional test for error_rate, exact bounded sequence for split
    # classifier log_loss / squared_error / absolute_error, normal mixture otherwise;
    # exact: exact bounded sequences for every bounded loss; mixture: the normal mixture
    # for every loss but error_rate (docs/comparisons.md)
    sequence: Literal["auto", "exact", "mixture"] = "auto"

    @field_validator("loss")
    @classmethod
    def _known_loss(cls, v: str) -> str:
        # a name that is no built-in loss may be a plugin's (checked once plugins load)
        if v not in LOSSES and not re.fullmatch(r"[a-z][a-z0-9_]*", v):
            raise ValueError(
                f"unknown loss {v!r}; choose from {list(LOSSES)} or a loaded plugin's name"
            )
        return v

    @model_validator(mode="after")
    def _check(self) -> ComparisonSettings:
        if self.control == self.treatment:
            raise ValueError("control and treatment must be different versions")
        c, t = self.traffic_split
        if c <= 0 or t <= 0:
            raise ValueError("traffic_split shares must be positive, e.g. [0.9, 0.1]")
        return self


class PluginSettings(_Section):
    """Metric plugins (docs/plugins.md)."""

    paths: tuple[Path, ...] = ()  # Python files defining MetricPlugin subclasses
    entry_points: bool = True  # also load the "monitor.metrics" entry-point group
    options: dict[str, dict[str, Any]] = Field(default_factory=dict)  # per plugin name


class SloSettings(_Section):
    """A service-level objective on one exported quality metric (docs/alerting.md).

    ``direction = "above"``: the metric must stay at or above ``objective`` (recall,
    accuracy); ``"below"``: at or below it (log_loss, ece, error_rate). With
    ``confidence = "interval"`` (the default) a breach needs the whole confidence interval
    past the objective, so sampling noise in a small window does not page anyone; with
    ``"point"`` the point estimate alone decides (faster, noisier).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    name: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:-]+$")
    model: str
    version: str = Field("all", min_length=1)  # "all": one instance per version seen
    metric: str = Field(pattern=r"^[a-z][a-z0-9_]*$")  # any exported quality metric name
    window: str  # one of the model's window names
    slice: str = Field("all", min_length=1)  # "all" or e.g. "country=US,device=ios"
    objective: float
    direction: Literal["above", "below"]
    # breach must last this long before firing; default: interval SLOs window/10 (at
    # most 15m), point SLOs 0
    for_: Seconds | None = Field(None, alias="for")
    # per instance, out of the deployment's [alerting] budget (default: an equal share)
    false_page_budget: float | None = Field(None, gt=0.0, lt=1.0)
    min_samples: int = Field(100, ge=1)  # fewer samples behind the metric: no breach
    # expected share of the window's labels already in (label-delay distribution) below
    # which the window is incomplete and cannot breach; unset: no such condition
    min_label_completeness: float | None = Field(None, gt=0.0, le=1.0)
    severity: str = Field("page", pattern=r"^[A-Za-z0-9_-]+$")
    confidence: Literal["point", "interval"] = "interval"
    runbook_url: str | None = None
    dashboard_url: str | None = None  # default: alerting.dashboard_url

    @field_validator("objective")
    @classmethod
    def _finite(cls, v: float) -> float:
        if v != v or v in (float("inf"), float("-inf")):
            raise ValueError("objective must be a finite number")
        return v


class AlertingSettings(_Section):
    """Where alerts go and how they are delivered (docs/alerting.md)."""

    alertmanager_url: str | None = Field(None, pattern=r"^https?://\S+$")  # e.g. :9093
    webhook_url: str | None = Field(None, pattern=r"^https?://\S+$")
    # HMAC-SHA256 key: header X-Monitor-Signature: sha256=<hex of the raw body>; from
    # MONITOR_ALERTING__WEBHOOK_SECRET or a file, never needed in the TOML
    webhook_secret: SecretStr | None = None
    webhook_secret_file: Path | None = None
    resend_interval: PositiveSeconds = 60.0  # firing alerts are re-sent this often
    timeout: PositiveSeconds = 5.0  # per HTTP request
    max_queue: int = Field(1000, ge=1, le=1_000_000)  # per receiver; oldest dropped first
    retry_initial: PositiveSeconds = 1.0  # first retry backoff (doubles, with jitter)
    retry_max: PositiveSeconds = 60.0  # backoff cap
    dashboard_url: str | None = None  # default dashboard link of every alert
    external_url: str | None = Field(None, pattern=r"^https?://\S+$")  # generatorURL base
    labels: dict[str, str] = Field(default_factory=dict)  # added to every alert (team, env)
    checkpoint_alerts: bool = True  # MonitorCheckpointFailing from the daemon itself
    drift_alerts: bool = False  # a drift detection raises ModelDriftDetected
    comparison_alerts: bool = False  # a rollback / invalid comparison decision raises one
    # a version that looks real (100+ predictions in an hour) rejected by max_versions
    version_alerts: bool = True
    # P(>= 1 false page per day) of the whole deployment with every interval SLO's metric
    # on its objective, shared over the SLOs' instances (docs/alerting.md)
    false_page_budget: float = Field(0.05, gt=0.0, lt=1.0)

    @field_validator("webhook_secret_file")
    @classmethod
    def _webhook_secret_file(cls, v: Path | None) -> Path | None:
        return check_secret_file(v)

    _secret_not_blank = field_validator("webhook_secret")(not_blank)

    @model_validator(mode="after")
    def _check(self) -> AlertingSettings:
        has_secret = self.webhook_secret is not None or self.webhook_secret_file is not None
        if has_secret and self.webhook_url is None:
            raise ValueError("webhook_secret is set but webhook_url is not")
        if self.webhook_secret is not None and self.webhook_secret_file is not None:
            raise ValueError("set webhook_secret or webhook_secret_file, not both")
        if self.retry_max < self.retry_initial:
            raise ValueError("retry_max must be at least retry_initial")
        bad = [k for k in self.labels if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", k)]
        if bad:
            raise ValueError(f"labels: {bad} are not valid Prometheus label names")
        return self

    def resolved_webhook_secret(self) -> str | None:
        if self.webhook_secret is not None:
            return self.webhook_secret.get_secret_value()
        if self.webhook_secret_file is not None:
            return self.webhook_secret_file.read_text().strip()
        return None


def model_params(model: ModelSettings) -> ModelParams:
    """What a model's metric families depend on (the cut-offs ``k`` for ranking, and for
    multiclass top-k accuracy)."""
    per_k = model.task == "ranking" or (
        model.task == "multiclass" and "top_k_accuracy" in model.metric_names
    )
    return ModelParams(model.task, tuple(model.classes), tuple(model.fbeta),
                       tuple(model.quantiles), tuple(model.gain_fractions),
                       tuple(model.k) if per_k else ())  # fmt: skip


def model_metric_names(model: ModelSettings) -> frozenset[str]:
    """Names a model's configured metrics are exported under ("fbeta" -> f2, f0_5...)."""
    names = set(exported_names(model_params(model), model.metric_names))
    if model.estimation is not None:  # SLOs may opt into the label-free estimates
        # multiclass: top-label accuracy and the expected confusion matrix's macro averages
        estimated = ESTIMATED_METRICS if model.task == "binary" else MULTICLASS_ESTIMATED_METRICS
        names |= {f"estimated_{m}" for m in estimated}
    return frozenset(names)


def _used_twice(section: str, what: str, names: list[str]) -> list[str]:
    """One problem per name given to more than one entry of ``section``."""
    return [
        f"{section}: {what} name {n!r} is used more than once"
        for n in sorted({n for n in names if names.count(n) > 1})
    ]


def _slo_problems(settings: Settings) -> list[str]:
    """Cross-checks of ``[[slos]]`` against the models (one "path: message" each)."""
    problems = _used_twice("slos", "SLO", [s.name for s in settings.slos])
    models = {m.name: (i, m) for i, m in enumerate(settings.models)}
    builtin = {name for catalog in TASK_METRICS.values() for name in catalog}
    builtin |= {  # need [models.estimation]
        f"estimated_{m}" for m in (*ESTIMATED_METRICS, *MULTICLASS_ESTIMATED_METRICS)
    }
    for i, slo in enumerate(settings.slos):
        where = f"slos[{i}]"
        if slo.model not in models:
            problems.append(f"{where}.model: unknown model {slo.model!r}")
            continue
        j, model = models[slo.model]
        windows = [w.label for w in model.windows]
        if slo.window not in windows:
            problems.append(
                f"{where}.window: {slo.window!r} is not a window of model {slo.model!r} "
                f"(models[{j}].windows: {windows})"
            )
        known = model_metric_names(model)
        # a name that is no built-in metric may be a plugin's (checked once plugins load);
        # one shaped like a built-in per-cut-off series (ndcg_at_7) is the model's or none
        stem, _, k = slo.metric.rpartition("_at_")
        per_k = k.isdigit() and getattr(definition(model.task, stem), "per_k", False)
        if slo.metric not in known and (slo.metric in builtin or per_k):
            problems.append(
                f"{where}.metric: {slo.metric!r} is not among the metrics of model "
                f"{slo.model!r} (models[{j}].metrics)"
            )
        if slo.slice != "all":
            dims = tuple(part.partition("=")[0] for part in slo.slice.split(","))
            if not all("=" in part for part in slo.slice.split(",")) or dims not in {
                s.dimensions for s in model.slices
            }:
                configured = [",".join(f"{d}=..." for d in s.dimensions) for s in model.slices]
                problems.append(
                    f"{where}.slice: {slo.slice!r} is not a slice of model {slo.model!r}; use "
                    f'"all" or one of {configured or "(no [[models.slices]] configured)"}'
                )
    try:
        allocate_budget(settings.alerting.false_page_budget, budget_shares(settings.slos))
    except ValueError as err:
        problems.append(f"alerting.false_page_budget: {err}")
    return problems


def budget_shares(slos: Sequence[SloSettings]) -> list[BudgetShare]:
    """What the deployment's false-page budget is shared over (alerting/slo_budget.py)."""
    return [
        BudgetShare(
            VERSIONS_PER_SLO if s.version == "all" else 1,
            s.false_page_budget,
            s.confidence == "interval",
        )
        for s in slos
    ]


def _check_cron(expr: str) -> str:
    from apscheduler.triggers.cron import CronTrigger

    try:
        CronTrigger.from_crontab(expr, timezone="UTC")
    except ValueError as err:
        raise ValueError(
            f"{expr!r} is not a crontab expression (minute hour day month weekday): {err}"
        ) from None
    return expr


def _check_timezone(name: str) -> str:
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(
            f"{name!r} is not an IANA time zone (e.g. 'Europe/Berlin', 'UTC')"
        ) from None
    return name


class ScheduleSettings(_Section):
    """Work tied to the calendar (docs/operations.md "Scheduled work"): a crontab
    expression in a time zone, run by APScheduler on the wall clock; the evaluation tick
    is not one of these (it runs on monotonic time)."""

    job: Literal["report", "rotate_reference", "summary"]
    name: str | None = Field(None, pattern=r"^[A-Za-z0-9_.:-]+$")  # default: the job
    cron: Annotated[str, AfterValidator(_check_cron)]  # "0 7 * * mon": Mondays 07:00
    timezone: Annotated[str, AfterValidator(_check_timezone)] = "UTC"
    # a run missed (the daemon was down at its time) runs once on start if at most this
    # late; missed runs are coalesced into one; later ones are skipped (outcome "missed")
    misfire_grace: PositiveSeconds = 3600.0
    jitter: Annotated[Seconds, Field(ge=0)] = 0.0  # a random delay of up to this
    period: PositiveSeconds = 7 * 86400.0  # report / rotate_reference: "last 7d"
    # report: written here as report-<time>.json and .html, the newest `keep` kept
    directory: Path | None = None
    keep: int = Field(8, ge=1, le=10_000)
    # report, summary: a short JSON summary POSTed here (report: with a link to the file)
    webhook_url: str | None = None
    link_base: str | None = None  # report: URL prefix under which `directory` is served
    # rotate_reference: these models (default: every model with a drift.reference file);
    # the new reference needs at least min_samples predictions in the period
    models: tuple[str, ...] = ()
    version: str | None = None  # rotate_reference: only this version's traffic
    min_samples: int = Field(1000, ge=1)

    @property
    def label(self) -> str:
        return self.name or self.job

    @model_validator(mode="after")
    def _check(self) -> ScheduleSettings:
        if self.job == "report" and self.directory is None and self.webhook_url is None:
            raise ValueError("a report job needs a directory, a webhook_url, or both")
        if self.job == "summary" and self.webhook_url is None:
            raise ValueError("a summary job needs webhook_url")
        if self.job != "report" and (self.directory is not None or self.link_base):
            raise ValueError("directory and link_base apply to report jobs only")
        if self.job != "rotate_reference" and (self.models or self.version):
            raise ValueError("models and version apply to rotate_reference jobs only")
        if self.webhook_url is not None and not re.match(r"^https?://", self.webhook_url):
            raise ValueError("webhook_url must be an http:// or https:// URL")
        return self


def _schedule_problems(settings: Settings) -> list[str]:
    """Cross-checks of ``[[schedules]]``: unique names, rotate_reference's models."""
    problems = _used_twice("schedules", "schedule", [s.label for s in settings.schedules])
    models = {m.name: (i, m) for i, m in enumerate(settings.models)}
    width = settings.evaluation.bucket_width
    for i, sched in enumerate(settings.schedules):
        if sched.job != "summary" and sched.period % width:
            problems.append(
                f"schedules[{i}].period: {format_duration(sched.period)} is not a multiple of "
                f"evaluation.bucket_width ({format_duration(width)})"
            )
        if sched.job != "rotate_reference":
            continue
        if settings.scale.mode == "partitioned":
            problems.append(
                f"schedules[{i}].job: rotate_reference keeps the new reference in this "
                'instance\'s state dir; scale.mode = "partitioned" has no shared one'
            )
        for name in sched.models:
            if name not in models:
                problems.append(f"schedules[{i}].models: unknown model {name!r}")
                continue
            j, m = models[name]
            if m.drift is None or m.drift.reference is None:
                problems.append(
                    f"schedules[{i}].models: model {name!r} has no drift.reference file to "
                    f"rotate (models[{j}].drift)"
                )
        if not sched.models and not any(
            m.drift is not None and m.drift.reference is not None for m in settings.models
        ):
            problems.append(
                f"schedules[{i}].job: rotate_reference needs a model with a drift.reference file"
            )
    return problems


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="MONITOR_", env_nested_delimiter="__", extra="forbid", frozen=True
    )

    kafka: KafkaSettings = KafkaSettings()
    http: HttpSettings = HttpSettings()
    state: StateSettings = StateSettings()
    scale: ScaleSettings = ScaleSettings()
    join: JoinSettings = JoinSettings()
    evaluation: EvaluationSettings = EvaluationSettings()
    models: tuple[ModelSettings, ...] = ()
    comparisons: tuple[ComparisonSettings, ...] = ()
    plugins: PluginSettings = PluginSettings()
    slos: tuple[SloSettings, ...] = ()
    alerting: AlertingSettings = AlertingSettings()
    schedules: tuple[ScheduleSettings, ...] = ()

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The environment overrides the TOML file (passed as init kwargs).
        return env_settings, init_settings, file_secret_settings

    @model_validator(mode="after")
    def _cross_checks(self) -> Settings:
        # Collect every cross-field problem, one "path: message" per line.
        problems: list[str] = []
        if not self.models:
            problems.append("models: at least one [[models]] entry is required")
        names = [m.name for m in self.models]
        problems += _used_twice("models", "model", names)
        tasks = {m.name: m.task for m in self.models}
        for i, comp in enumerate(self.comparisons):
            if comp.model not in names:
                problems.append(f"comparisons[{i}].model: {comp.model!r} is not a configured model")
            elif comp.loss not in LOSSES:
                pass  # a plugin's loss: checked against the loaded plugins (wiring)
            elif comp.loss not in TASK_LOSSES[tasks[comp.model]]:
                task = tasks[comp.model]
                problems.append(
                    f"comparisons[{i}].loss: {comp.loss!r} does not apply to {task} model "
                    f"{comp.model!r}; choose from {list(TASK_LOSSES[task])}"
                )
            elif comp.loss == "estimated_error_rate" and (
                comp.mode != "split" or self.model(comp.model).estimation is None
            ):
                problems.append(
                    f"comparisons[{i}].loss: 'estimated_error_rate' needs mode 'split' and "
                    f"[models.estimation] on model {comp.model!r} (its calibration check)"
                )
            elif comp.sequence == "exact" and tasks[comp.model] == "regression":
                problems.append(
                    f"comparisons[{i}].sequence: 'exact' needs a bounded loss; regression "
                    f"losses of {comp.model!r} are unbounded (use 'auto')"
                )
        problems += _used_twice("comparisons", "comparison", [c.name for c in self.comparisons])
        width = self.evaluation.bucket_width
        for i, model in enumerate(self.models):
            for j, w in enumerate(model.windows):
                for key in ("size", "delay"):
                    value = getattr(w, key)
                    if value % width:
                        problems.append(
                            f"models[{i}].windows[{j}].{key}: {format_duration(value)} is not a "
                            f"multiple of evaluation.bucket_width ({format_duration(width)})"
                        )
        problems += _slo_problems(self)
        problems += _schedule_problems(self)
        if self.scale.mode == "partitioned":
            if self.evaluation.clock != "wall":
                problems.append(
                    'evaluation.clock: "event" is one engine\'s watermark; scale.mode = '
                    '"partitioned" evaluates every instance at the same wall-clock time'
                )
            if self.scale.exporter_lease * 1000 >= self.kafka.session_timeout_ms:
                problems.append(
                    f"scale.exporter_lease: {format_duration(self.scale.exporter_lease)} must be "
                    f"below kafka.session_timeout_ms ({self.kafka.session_timeout_ms} ms): the "
                    "exporter fails over within one session timeout"
                )
            for i, model in enumerate(self.models):
                if model.drift is not None and model.drift.reference_window is not None:
                    problems.append(
                        f"models[{i}].drift.reference_window: a live reference is one engine's "
                        'history; scale.mode = "partitioned" needs a reference file'
                    )
        if problems:
            raise ValueError("\n".join(problems))
        return self

    def model(self, name: str) -> ModelSettings:
        for m in self.models:
            if m.name == name:
                return m
        raise KeyError(name)


class ConfigError(Exception):
    """Every problem found in a configuration, each as ``(key path, message)``."""

    def __init__(self, problems: list[tuple[str, str]], source: str) -> None:
        self.problems = problems
        self.source = source
        lines = "\n".join(f"  {path}: {msg}" for path, msg in problems)
        super().__init__(f"{source}: {len(problems)} problem(s)\n{lines}")


def _path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in ("function-after", "function-before") or str(part).startswith(
            ("function-", "constrained-")
        ):
            continue
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


def _problems(err: ValidationError) -> list[tuple[str, str]]:
    problems = []
    for e in err.errors(include_url=False):
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            msg = "unknown key (not a setting of this section)"
        elif e["type"] == "missing":
            msg = "required key is missing"
        msg = msg.removeprefix("Value error, ")
        base = _path(tuple(e["loc"]))
        for line in msg.splitlines():
            path, sep, rest = line.partition(": ")
            if base == "(top level)" and sep and " " not in path:
                problems.append((path, rest))
            else:
                problems.append((base, line))
    return problems


def settings_from_mapping(data: dict[str, Any], source: str = "<config>") -> Settings:
    """Validate a parsed configuration (plus environment overrides), or raise ConfigError."""
    try:
        return Settings(**data)
    except ValidationError as err:
        raise ConfigError(_problems(err), source) from None
    except SettingsError as err:  # a MONITOR_* override that is not valid JSON
        m = re.search(r'field "([^"]+)"', str(err))
        field = m.group(1) if m else "(environment)"
        cause = f": {err.__cause__}" if err.__cause__ else ""
        raise ConfigError(
            [(field, f"a MONITOR_{field.upper()}* environment override is not valid JSON{cause}")],
            source,
        ) from None


def load_settings(path: Path | str | None) -> Settings:
    """Read and validate a TOML config file; ConfigError lists every problem by key path."""
    if path is None:
        return settings_from_mapping({}, "<defaults>")
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError([("(file)", f"{p} does not exist")], str(p)) from None
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError([("(file)", f"cannot read {p}: {err}")], str(p)) from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError([("(syntax)", f"not valid TOML: {err}")], str(p)) from None
    _resolve_relative(data, p.parent)
    return settings_from_mapping(data, str(p))


def _resolve_relative(data: dict[str, Any], base: Path) -> None:
    """Drift reference and plugin paths in a config file are relative to that file, not
    to the current directory, so a config and its files can travel together."""
    plugins = data.get("plugins")
    if isinstance(plugins, dict) and isinstance(plugins.get("paths"), list):
        plugins["paths"] = [
            str(base / p) if isinstance(p, str) and p and not Path(p).is_absolute() else p
            for p in plugins["paths"]
        ]
    models = data.get("models")
    if not isinstance(models, list):
        return
    for m in models:
        drift = m.get("drift") if isinstance(m, dict) else None
        ref = drift.get("reference") if isinstance(drift, dict) else None
        if isinstance(ref, str) and ref and not Path(ref).is_absolute():
            drift["reference"] = str(base / ref)


# configuration keys that name a secret (credentials in URLs: redact.mask_urls)
SECRET_KEY = re.compile(r"(?i)(pass|secret|token|credential|jaas|sasl|private|api.?key|key$)")


def _masked(value: Any, key: str = "") -> Any:
    if isinstance(value, dict):
        return {k: _masked(v, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [_masked(v, key) for v in value]
    if isinstance(value, str):
        if key and SECRET_KEY.search(key) and not key.endswith(("_file", "file")):
            return "**********"
        return mask_urls(value)
    return value


def redacted(settings: Settings) -> dict[str, Any]:
    """The configuration as plain data with every secret masked, safe to log: SecretStr
    fields, credentials inside URLs (``user:pass@``) and secret-like
    ``extra_consumer_config`` values."""
    data = settings.model_dump(mode="json")
    data["kafka"]["extra_consumer_config"] = {
        k: "**********" if SECRET_KEY.search(k) else v
        for k, v in data["kafka"]["extra_consumer_config"].items()
    }
    masked: dict[str, Any] = _masked(data)
    return masked


def secret_values(settings: Settings) -> list[str]:
    """Every secret the configuration holds, for the log formatter to mask wherever it
    appears (monitor/redact.py)."""
    k, h, a = settings.kafka, settings.http, settings.alerting
    values: list[str | None] = [
        k.ssl_password.get_secret_value() if k.ssl_password else None,
        h.basic_auth_password.get_secret_value() if h.basic_auth_password else None,
        a.webhook_secret.get_secret_value() if a.webhook_secret else None,
    ]
    for resolve in (k.resolved_sasl_password, h.resolved_password, a.resolved_webhook_secret):
        with contextlib.suppress(OSError):
            values.append(resolve())
    values += [str(v) for key, v in k.extra_consumer_config.items() if SECRET_KEY.search(key)]
    for url in (a.alertmanager_url, a.webhook_url):
        m = re.match(r"^[a-z][a-z0-9+.-]*://([^/\s@]+)@", url or "", re.I)
        if m:
            values += [m.group(1), *m.group(1).split(":", 1)[1:]]
        # values of secret-named query parameters (?token=...), wherever they reappear
        query = urllib.parse.urlsplit(url or "").query
        values += [v for k, v in urllib.parse.parse_qsl(query) if SECRET_KEY.search(k)]
    return [v for v in values if v]
