"""A study document's `kernel.module`: what the service accepts and refuses (naming the field and
the fix), what it sends workers, and the identity an artifact of such a kernel carries."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from service.artifacts.versions import kernel_name
from service.errors import Invalid
from service.studies import documents
from wire.artifact_controls import kernel_identity
from wire.modules import module_target

LIGER_RMS = "liger_kernel.ops.rms_norm:_rms_norm_forward_kernel"
HARNESS = "DTYPE = 'bfloat16'\n"
SPACE = [{"name": "BLOCK_SIZE", "type": "categorical", "choices": [1024, 2048, 4096]},
         {"name": "num_warps", "type": "categorical", "choices": [4, 8, 16]}]


def document(**kernel: Any) -> dict[str, Any]:
    return {"name": "liger rmsnorm", "objectives": ["runtime_ms"], "space": SPACE,
            "baseline": {"BLOCK_SIZE": 4096, "num_warps": 8},
            "kernel": {"backend": "triton", "workload": [{"dims": {"rows": 1, "cols": 4096}}], **kernel}}


def refusal(raw: dict[str, Any]) -> Invalid:
    with pytest.raises(Invalid) as caught:
        documents.validate(raw)
    return caught.value


def test_a_module_kernel_travels_as_its_entry_with_its_baseline() -> None:
    resolved = documents.validate(document(module=LIGER_RMS, options={"harness_source": HARNESS}))
    assert resolved.kernel.entry == LIGER_RMS and resolved.kernel.source is None
    assert module_target(resolved.kernel) == LIGER_RMS
    assert resolved.baseline == {"BLOCK_SIZE": 4096, "num_warps": 8}
    identity = kernel_identity(resolved.kernel)
    assert identity.name == LIGER_RMS == kernel_name(resolved.kernel, "the study")
    # the reference and the harness stand for the package's source, which the service cannot read
    assert identity.source_sha256 == hashlib.sha256(f"module {LIGER_RMS}\n{HARNESS}".encode()).hexdigest()


@pytest.mark.parametrize("kernel, field, words", [
    ({"module": "liger_kernel.ops.rms_norm", "options": {"harness_source": HARNESS}}, "kernel",
     "write package.path:function"),
    ({"module": LIGER_RMS}, "kernel", "needs its harness"),
    ({"module": LIGER_RMS, "entry": "f", "options": {"harness_source": HARNESS}}, "kernel", "leave entry out"),
    ({"module": LIGER_RMS, "source": "x", "options": {"harness_source": HARNESS}}, "kernel",
     "exactly one of builtin"),
    ({"module": "minikern.ops.rms_norm:_rms_norm_forward_kernel", "backend": "cpu"}, "kernel", "options.problem"),
    ({"module": "pkg.mod:fn", "backend": "python"}, "kernel", "names its module:function in source"),
])
def test_a_wrong_module_kernel_is_refused_naming_the_fix(kernel: dict[str, Any], field: str, words: str) -> None:
    error = refusal(document(**kernel))
    assert error.field == field and words in error.message, (error.field, error.message)


def test_a_module_kernel_needs_a_space_with_the_librarys_baseline() -> None:
    raw = document(module=LIGER_RMS, options={"harness_source": HARNESS})
    del raw["space"], raw["baseline"]
    error = refusal(raw)
    assert error.field == "space" and "given by module needs a search space" in error.message


def test_per_token_objectives_need_the_token_dim_in_every_shape() -> None:
    raw = document(module=LIGER_RMS, options={"harness_source": HARNESS})
    raw["objectives"] = ["time_per_token_us", "tokens_per_joule"]
    error = refusal(raw)
    assert error.field == "kernel.options.token_dim" and "'m'" in error.message, error.message
    raw["kernel"]["options"]["token_dim"] = "rows"
    resolved = documents.validate(raw)
    assert [(o.name, o.direction) for o in resolved.objectives] == [("time_per_token_us", "minimize"),
                                                                    ("tokens_per_joule", "maximize")]
