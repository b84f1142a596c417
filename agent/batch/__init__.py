"""`perfagent batch`: tasks x models x samples as job processes, a ledger to resume from, and the summary."""
