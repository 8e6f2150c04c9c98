"""[jobs]: long-running work (adr/0028): when a call yields its command as a job, how many jobs there may be, how
long an ended job's result is kept, and the memory that keeps cut results readable in full
(RELAY_SHELL_YIELD_AFTER, _MAX_JOBS, _JOB_RETENTION, _OUTPUT_STORE_BYTES, _OUTPUT_RETENTION)."""

from __future__ import annotations

from pydantic import Field

from relay_shell.settings.values import Area


class JobSettings(Area):
    yield_after: float = Field(
        45.0,
        ge=0.0,
        le=86400.0,
        description="seconds after which shell_exec, shell_script and ssh_exec return a job handle while the "
        "command runs on (below the common 60 s client request timeout); the call's yield_after overrides it; "
        "0 = never, 0 to 86400",
    )
    max_jobs: int = Field(
        16,
        ge=1,
        le=1024,
        description="jobs held at once, running or ended and kept; a call beyond it waits for its end, 1 to 1024",
    )
    job_retention: float = Field(
        600.0, ge=1.0, le=604800.0, description="seconds an ended job's result stays readable, 1 to 604800"
    )
    output_store_bytes: int = Field(
        64 * 1024 * 1024,
        ge=0,
        le=16 * 1024**3,
        description="bytes of memory holding cut results in full (and output still being produced), all together; "
        "the oldest kept output is dropped first; 0 = keep none, 0 to 17179869184",
    )
    output_retention: float = Field(
        600.0, ge=1.0, le=86400.0, description="seconds a cut result stays readable in full, 1 to 86400"
    )
