"""Readonly enforced by the kernel (adr/0024): Landlock, no_new_privs, a syscall filter and reduced capabilities
for every process tree a readonly call or session starts."""
