"""Other harnesses' files in and out: GSO, SWE-bench and ISO-Bench records as tasks, predictions read and written,
runs exported. Everything read here comes from elsewhere, so it is data, validated, never code."""
