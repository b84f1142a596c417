"""One run of one agent on one task: the loop, its tools and prompts, the runner that grades and writes report.json."""
