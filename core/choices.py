"""Choices that carry their label and display colour, so templates never compare raw strings."""

from django.db import models


class ColouredChoices(models.TextChoices):
    @property
    def colour(self) -> str:
        return self._colours().get(self.value, "grey")

    @classmethod
    def _colours(cls) -> dict[str, str]:
        return {}
