"""The scripts an imported task's commands run (`perfagent tasks import`), as real files: copied as they are
into the task's folder, beside the JSON that holds what differs per task, which they read at run time. So a
record's text is only ever data to them, never code. Stdlib only and Python 3.9+: they run in the task's
interpreter, which is not perfagent's."""
