"""What differs between the SQL engines' statement texts: the placeholder and the database's clock. Statements are
written once, with `?` placeholders and `{now}` for the clock, and each engine's store says its own."""

from __future__ import annotations

from typing import ClassVar


class Dialect:
    placeholder: ClassVar[str] = "?"
    now: ClassVar[str] = ""  # the database's clock in epoch seconds, where statements need it

    def _sql(self, statement: str) -> str:
        """The statement with this engine's placeholder and clock."""
        return statement.replace("?", self.placeholder).replace("{now}", self.now)
