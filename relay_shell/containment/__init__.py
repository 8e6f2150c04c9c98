"""Process containment: units (cgroup v2 or subreaper + marker) that hold every process of a call or session,
and the leftovers of earlier server processes (adr/0015)."""
