"""Warnings that reach people: notifications, daily digests, e-mail and webhooks."""
