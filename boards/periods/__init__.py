"""The board's periods (issue 15): a month's resource profile (peak and mean concurrent GPUs held, card-hours
and efficiency per GPU model and per team, with the hourly series for its chart) and the projection of the
next month's need from the full months before it."""
