# An object whose __nv_relfatbin holds one small container: a 16-byte header and one 64-byte
# cubin entry header with no payload. The scale tests copy it into archives of many members.
        .section __nv_relfatbin,"a"
        .p2align 3
        .long 0xBA55ED50        # magic
        .short 1, 16            # version, header size
        .quad 64                # bytes after the header
        .short 2, 0x0101        # kind: cubin
        .long 64                # entry header size
        .quad 0                 # payload size
        .long 0, 0              # compressed size, options offset
        .short 8, 1             # minor, major
        .long 80                # arch
        .long 0, 0              # name offset, name length
        .quad 0x11, 0, 0        # flags, reserved, uncompressed size
        .section .note.GNU-stack,"",@progbits
