"""Booked GPU time: bookings, holds and maintenance windows, free-GPU search and the earliest-slot
estimator, the booking watch (idle warnings, release, auto-end), the calendar pages and API."""
