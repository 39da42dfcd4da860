#!/usr/bin/env python3
"""Writes syndrome_table.bin, the correction table of the lut_decode example handler.

Each syndrome byte holds two independent blocks of the 3-qubit bit-flip (repetition) code, two
syndrome bits each: bit 0 = Z0Z1 and bit 1 = Z1Z2 of block A, bits 2 and 3 the same for block B.
The table maps a syndrome byte to a correction byte: which qubit to flip in block A (bits 0-2)
and in block B (bits 3-5). A single flip of qubit 0 fires Z0Z1 only, qubit 1 both, qubit 2 Z1Z2
only. Bytes with any of bits 4-7 set are not syndromes of this code and map to 0xff.

    python3 make_syndrome_table.py [OUT]      # default: syndrome_table.bin beside this script
    cudaq-rt-link app.cudaqpkg --arch sm_90 --Xnvjitlink=-variables-used=cudaq_rt_example_lut
    cudaq-rt-run app.cudaqpkg --global cudaq_rt_example_lut=@syndrome_table.bin \\
        --call lut_decode --arg hex:01020308  # answers ok: 01040220

The same table without Python (the 16 syndromes 0x00..0x0f, then 240 times 0xff):

    { printf '\\000\\001\\004\\002\\010\\011\\014\\012\\040\\041\\044\\042\\020\\021\\024\\022'
      head -c 240 /dev/zero | tr '\\0' '\\377'; } > syndrome_table.bin
"""
import os
import sys

# Syndrome bits (Z1Z2 << 1 | Z0Z1) -> the qubit to flip, as a one-hot mask of the block's 3 qubits.
BLOCK_CORRECTION = {0b00: 0b000, 0b01: 0b001, 0b11: 0b010, 0b10: 0b100}


def table():
    out = bytearray(b"\xff" * 256)
    for syndrome in range(16):
        a, b = syndrome & 0b11, syndrome >> 2
        out[syndrome] = BLOCK_CORRECTION[a] | BLOCK_CORRECTION[b] << 3
    return bytes(out)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "syndrome_table.bin")
    with open(path, "wb") as f:
        f.write(table())


if __name__ == "__main__":
    main()
