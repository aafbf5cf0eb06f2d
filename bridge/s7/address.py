"""S7 addresses as TIA Portal and STEP 7 write them: `DB10.DBD4`, `DB10.DBX2.3`, `M0.1`, `IW64`.

Pure. `parse_address` accepts, case-insensitively and with an optional leading `%` (TIA's
absolute addresses):

- data blocks: `DB<n>.DBX<byte>.<bit>`, `DB<n>.DBB<byte>`, `DB<n>.DBW<byte>`, `DB<n>.DBD<byte>`;
- merkers, inputs and outputs: `M<byte>.<bit>`, `MB<byte>`, `MW<byte>`, `MD<byte>`, the same
  with `I` and `Q` (and the German mnemonics `E` for inputs, `A` for outputs);
- timers and counters: `T<n>`, `C<n>` (German `Z<n>`).

The letter after the area is the width the address names: X a bit, B a byte, W a word (2
bytes), D a double word (4 bytes); the point's type must fit it (bridge/s7/config.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

Area = Literal["DB", "M", "I", "Q", "T", "C"]
Width = Literal["X", "B", "W", "D", "T", "C"]
MAX_BYTE = (1 << 21) - 1  # an S7 address is a 24-bit bit offset
WIDTH_BYTES = {"X": 1, "B": 1, "W": 2, "D": 4, "T": 2, "C": 2}

_DB = re.compile(r"^DB(\d+)\.DB([XBWD])(\d+)(?:\.(\d+))?$")
_MIQ = re.compile(r"^([MIQEA])([BWD]?)(\d+)(?:\.(\d+))?$")
_TC = re.compile(r"^([TCZ])(\d+)$")
_AREAS: dict[str, Area] = {"M": "M", "I": "I", "E": "I", "Q": "Q", "A": "Q"}
EXAMPLES = "DB10.DBD4, DB10.DBX2.3, DB1.DBW0, M0.1, MW10, IW64, Q0.1, T2, C3"


@dataclass(frozen=True, slots=True)
class Address:
    """Where a point is: area, data block (0 outside DB), byte (or timer/counter number),
    the width the address names, and the bit of a bit address."""

    area: Area
    db: int
    start: int
    width: Width
    bit: int | None = None

    def __str__(self) -> str:
        if self.area in ("T", "C"):
            return f"{self.area}{self.start}"
        bit = f".{self.bit}" if self.bit is not None else ""
        if self.area == "DB":
            return f"DB{self.db}.DB{self.width}{self.start}{bit}"
        return f"{self.area}{'' if self.width == 'X' else self.width}{self.start}{bit}"

    @property
    def block(self) -> str:
        """The memory the address is in: `DB10`, `M`, `I`, `Q`, `T`, `C`."""
        return f"DB{self.db}" if self.area == "DB" else self.area


def parse_address(text: str) -> Address:
    """An address in TIA Portal notation; ValueError saying what is wrong."""
    clean = text.strip().upper().removeprefix("%").replace(" ", "")
    if match := _DB.match(clean):
        db, width, start, bit = int(match[1]), match[2], int(match[3]), match[4]
        if not 1 <= db <= 65535:
            raise ValueError(f"{text!r}: data block numbers are 1-65535")
        return _checked(text, Address("DB", db, start, width, _bit(text, width, bit)))  # type: ignore[arg-type]
    if match := _MIQ.match(clean):
        width = match[2] or "X"
        return _checked(text, Address(_AREAS[match[1]], 0, int(match[3]), width,  # type: ignore[arg-type]
                                      _bit(text, width, match[4])))
    if match := _TC.match(clean):
        number = int(match[2])
        if number > 65535:
            raise ValueError(f"{text!r}: timer and counter numbers are 0-65535")
        if match[1] == "T":
            return Address("T", 0, number, "T")
        return Address("C", 0, number, "C")
    raise ValueError(f"{text!r} is not an S7 address (TIA Portal notation, e.g. {EXAMPLES})")


def _bit(text: str, width: str, bit: str | None) -> int | None:
    if width == "X":
        if bit is None:
            raise ValueError(f"{text!r}: a bit address needs its bit (e.g. DB1.DBX2.3, M0.1)")
        if int(bit) > 7:
            raise ValueError(f"{text!r}: bits are 0-7")
        return int(bit)
    if bit is not None:
        raise ValueError(f"{text!r}: only a bit address (DBX, M0.1, I0.0) takes a bit")
    return None


def _checked(text: str, address: Address) -> Address:
    if address.start > MAX_BYTE:
        raise ValueError(f"{text!r}: byte offsets go up to {MAX_BYTE}")
    return address
