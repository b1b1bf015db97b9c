"""Where every GPU-second went: the five states of each GPU-minute per team and project, the daily
aggregation, pending days, the usage report and replayed history."""
