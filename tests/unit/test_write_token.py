"""WriteToken.parse: pg_lsn text in, a typed error for everything else."""

from __future__ import annotations

import pytest

from tnsrag_db._db.replicas import WriteToken
from tnsrag_db._errors import ValidationError


@pytest.mark.parametrize("value", [None, b"0/3000148", 3000148, "", "3000148", "0/", "/5", "-1/5", "0x1/5",
                                   " 0/5", "0/5 ", "1/2/3", "123456789/0", "g/0"])
def test_anything_but_pg_lsn_text_is_a_typed_value_error(value: object) -> None:
    with pytest.raises(ValidationError, match="not a WAL position") as caught:
        WriteToken.parse(value)  # type: ignore[arg-type]
    assert isinstance(caught.value, ValueError)


def test_the_largest_position_round_trips() -> None:
    token = WriteToken.parse("ffffffff/FFFFFFFF")
    assert token.lsn == 2**64 - 1 and str(token) == "FFFFFFFF/FFFFFFFF"
