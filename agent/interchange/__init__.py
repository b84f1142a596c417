"""agent.interchange's face: its names load lazily (PEP 562); the two FORMATS are named for their direction.

Other harnesses' files in and out: GSO, SWE-bench and ISO-Bench records as tasks, predictions read and written,
runs exported. Everything read here comes from elsewhere, so it is data, validated, never code."""

from typing import TYPE_CHECKING

from agent.util.lazy import lazy_names

if TYPE_CHECKING:
    from agent.interchange.export import FORMATS as EXPORT_FORMATS
    from agent.interchange.export import (csv_text, load_jobs, prediction, predictions_json, predictions_jsonl,
                                          repeated, select)
    from agent.interchange.sources import read_sources
    from agent.interchange.task_import import FORMATS as IMPORT_FORMATS
    from agent.interchange.task_import import import_records
else:
    __getattr__ = lazy_names(__name__, {
        "EXPORT_FORMATS": "agent.interchange.export:FORMATS", "IMPORT_FORMATS": "agent.interchange.task_import:FORMATS",
        **dict.fromkeys(("csv_text", "load_jobs", "prediction", "predictions_json", "predictions_jsonl", "repeated",
                         "select"), "agent.interchange.export"),
        "import_records": "agent.interchange.task_import", "read_sources": "agent.interchange.sources"})

__all__ = ["EXPORT_FORMATS", "IMPORT_FORMATS", "csv_text", "import_records", "load_jobs", "prediction",
           "predictions_json", "predictions_jsonl", "read_sources", "repeated", "select"]
