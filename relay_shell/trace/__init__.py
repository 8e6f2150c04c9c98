"""The exec trace (adr/0019): every execve/execveat of the process trees the server starts, via seccomp user
notification."""
