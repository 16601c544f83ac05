"""Moving features in and out of SpecForge's and speculators' offline datasets (`hsstore export`, `hsstore import`).
Needs torch and safetensors; `import client` does not load it."""

from client.exchange.exporting import ExportChoice, Exported, choose, export
from client.exchange.formats import FormatError
from client.exchange.importing import ImportPlan, ImportSummary, import_dir, plan_import
from schemas.resolution import newest_versions

__all__ = [
    "ExportChoice",
    "Exported",
    "FormatError",
    "ImportPlan",
    "ImportSummary",
    "choose",
    "export",
    "import_dir",
    "newest_versions",
    "plan_import",
]
