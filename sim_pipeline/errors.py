"""The one error family every user-facing failure belongs to."""

from sim_pipeline.redaction import redact


class SimPipelineError(Exception):
    """A failure the user can fix: the message says what is wrong, the value, and the fix.

    Its message never holds a secret: every key the environment holds is redacted when the error is made, so
    neither the terminal nor Dagster's event log can show one."""

    def __init__(self, *args: object) -> None:
        super().__init__(*(redact(a) if isinstance(a, str) else a for a in args))


class DomainPackError(SimPipelineError):
    """A domain pack file is missing or invalid."""


class RegistryError(SimPipelineError):
    """The policy registry (data/policies.yaml) is invalid."""


class CoverageError(SimPipelineError):
    """A covering array cannot be built as asked (e.g. unsatisfiable constraints)."""


class SearchConfigError(SimPipelineError):
    """The search arms are misconfigured (an arm without weights, a floor above its cap, starts not summing to 1)."""


class ModelCallError(SimPipelineError):
    """A model call failed in a way retrying will not fix (auth, quota, unknown model)."""


class StatisticsError(SimPipelineError):
    """A statistic, delta or judge-trust report was asked for with invalid options or an unusable table."""


class CutError(SimPipelineError):
    """A training cut cannot be built or gated from its inputs (missing columns, bad option)."""


class WorldError(SimPipelineError):
    """Tool schemas, world options or a world setup cannot build a sandbox world."""


class ExportError(CutError):
    """A cut cannot be exported to a trainer's format (missing partitions, refused by the publish gate, bad format)."""


class WarehouseError(SimPipelineError):
    """A warehouse file is missing its content, corrupt, or does not match the checksum recorded when it was written."""


class PartitionBusy(SimPipelineError):
    """A partition another process is running now; `name` is its lock and `holder` what the holder recorded."""

    def __init__(self, message: str, name: str = "", holder: dict[str, object] | None = None) -> None:
        super().__init__(message)
        self.name = name
        self.holder = holder or {}


def one_line(exc: BaseException) -> str:
    """An error on one line (YAML errors span several), named by its class when it is not one of the project's own."""
    text = " ".join(str(exc).split())
    return text if isinstance(exc, SimPipelineError) else f"{exc.__class__.__name__}: {text} (a bug: please report it)"
