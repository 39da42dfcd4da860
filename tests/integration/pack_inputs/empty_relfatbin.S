# An object whose __nv_relfatbin section exists but holds nothing.
        .section __nv_relfatbin,"a"
        .section .note.GNU-stack,"",@progbits
