"""Work tied to the calendar (``[[schedules]]``): APScheduler cron triggers run the
period report, the drift-reference rotation and the summary; the evaluation tick is not
scheduled here (it runs on monotonic time, ``app.Daemon._evaluate_every``)."""
