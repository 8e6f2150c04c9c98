"""ssh_forward, ssh_forward_list and ssh_forward_close: validate, admit every destination spelling, open the
tunnel (forwards/tunnel.py, imported on first use) and register it with its owner.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from relay_shell.capture import BoundedCapture
from relay_shell.plan import Execution, Plan, ProgressFn, Subject
from relay_shell.ssh.forwards.registry import Forward, ForwardRegistry
from relay_shell.ssh.forwards.spec import ForwardSpec, host_port, parse_bind_address, parse_spec
from relay_shell.ssh.forwards.traffic import Traffic

if TYPE_CHECKING:
    from relay_shell.ssh.connection_args import ConnectionArgs
    from relay_shell.ssh.forwards.connections import Admit
    from relay_shell.ssh.forwards.tunnel import Tunnel
    from relay_shell.ssh.state import Ssh
    from relay_shell.ssh.target import Route


# Admission of a SOCKS destination when a client names it: (subject, fields for a refusal record, whether a refusal
# is recorded) -> why refused.
AdmitLater = Callable[[Subject, dict[str, Any], bool], str | None]


def destination_names(ssh: Ssh, host: str, port: int) -> tuple[str, ...]:
    """Every spelling of a destination for policy, bare and with its port (`127.0.0.1:5432`, `[::1]:5432`)."""
    from relay_shell.ssh.target import reached_spellings

    names = reached_spellings(ssh.inventory, host)
    return (*names, *(host_port(name, port) for name in names))


def prepare_forward(
    ssh: Ssh,
    registry: ForwardRegistry,
    owner: str,
    client_id: str,
    admit_later: AdmitLater,
    *,
    host: str,
    spec: str,
    bind_address: str,
    connection: ConnectionArgs,
) -> Plan:
    """ssh_forward: validate, resolve the SSH route, let policy see both ends; execute opens the listener."""
    from relay_shell.ssh.forwards.tunnel import open_tunnel
    from relay_shell.ssh.target import target_record

    parsed = parse_spec(spec)
    bind, loopback = parse_bind_address(bind_address)
    route = ssh.route(host, connection)
    side = "on the SSH host" if parsed.kind == "R" else "on this machine"
    notes: list[str] = []
    listener = f"{host_port(bind, parsed.listen_port)} ({side})"
    subject = _forward_subject(ssh, parsed, route, connection, listener, loopback)
    target = target_record(route)
    forward_id = registry.new_id()
    target["forward_id"] = forward_id
    target["spec"] = parsed.text()
    target["bind_address"] = bind
    target["destination"] = parsed.destination()
    admit = socks_admission(ssh, admit_later, forward_id, host, route)

    async def execute(progress: ProgressFn) -> Execution:
        registry.reserve(owner)
        try:
            tunnel = await open_tunnel(
                ssh.pool, route, parsed, bind, ssh.settings.ssh.ssh_connect_timeout, admit, registry.budget
            )
        except BaseException:
            registry.unreserve(owner)
            raise
        forward = Forward(
            forward_id=forward_id,
            owner=owner,
            client_id=client_id,
            host=host,
            via=route.target.describe(),
            spec=parsed,
            tunnel=tunnel,
        )
        registry.add(forward)
        target["spec"] = parsed.text(tunnel.listen_port)
        target["listen"] = forward.listen()
        target["host_key"] = tunnel.host_key
        notes.extend(_opened_notes(parsed, tunnel, loopback))
        capture = BoundedCapture(ssh.settings.limits.max_output)
        capture.feed(_opened_text(parsed, forward, route, side).encode())
        return Execution(
            status="ok",
            output=capture.result(),
            headline=f"[forward {forward_id} open | {parsed.text(tunnel.listen_port)} via {route.target.describe()}]",
            fields={"forward": forward.describe(), "forward_id": forward_id, "listen_port": tunnel.listen_port},
        )

    return Plan(subject=subject, execute=execute, notes=notes, target=target)


def _forward_subject(
    ssh: Ssh, parsed: ForwardSpec, route: Route, connection: ConnectionArgs, listener: str, loopback: bool
) -> Subject:
    """What policy sees of a forward: the SSH host and the fixed destination in all their spellings, and the
    listener when hosts other than this one can reach it."""
    destination: tuple[str, ...] = ()
    if parsed.dest_host is not None and parsed.dest_port is not None:
        destination = destination_names(ssh, parsed.dest_host, parsed.dest_port)
    # An R listener is another host's way into this machine, its loopback included: whoever can connect to it
    # there (any user of the SSH host, anyone if its sshd has GatewayPorts=yes) reaches the destination from
    # here. So it is tier 2 whatever it binds, like a local listener other hosts can reach.
    exposed = parsed.kind == "R" or not loopback
    return Subject(
        hosts=(*route.spellings, *destination),
        unverified_host_key=connection.known_hosts == "ignore",
        fixed_tier=1,  # a listener until ssh_forward_close: a reversible change
        exposed_listener=listener if exposed else None,
    )


def socks_admission(ssh: Ssh, admit_later: AdmitLater, forward_id: str, host: str, route: Route) -> Admit:
    """How a SOCKS forward admits the destination each client names."""

    def admit(dest_host: str, dest_port: int, traffic: Traffic) -> str | None:
        """A SOCKS destination: policy decides each time; a refusal is counted, and recorded only the first time
        for each destination (any local process can connect, so one record per connection would let it flood
        the audit log). The counts per destination go into the forward:end record."""
        where = host_port(dest_host, dest_port)
        fields = {
            "forward_id": forward_id,
            "destination": where,
            "target": {"host": host, "via": route.target.describe()},
            "note": "later refusals of this destination by this forward are counted in its forward:end record",
        }
        subject = Subject(hosts=destination_names(ssh, dest_host, dest_port), fixed_tier=0)
        refused = admit_later(subject, fields, traffic.records_refusal(where))
        if refused is not None:
            traffic.count_refusal(where)
        return refused

    return admit


def _opened_notes(parsed: ForwardSpec, tunnel: Tunnel, loopback: bool) -> list[str]:
    notes = []
    if tunnel.accepted_new_key:
        notes.append(f"host key {tunnel.host_key} was not known and is now trusted (accept-new)")
    if parsed.listen_port == 0:
        notes.append(f"listen port 0: the listener picked port {tunnel.listen_port}")
    if parsed.kind == "R" and not loopback:
        notes.append(
            "the SSH server decides where a remote listener binds: with sshd's default GatewayPorts=no it "
            "stays on the SSH host's loopback"
        )
    return notes


def _opened_text(parsed: ForwardSpec, forward: Forward, route: Route, side: str) -> str:
    """The result text of an open forward: where it listens, where connections go, how to close it."""
    if parsed.kind == "D":
        reached = f"each SOCKS client names its destination, reached from {route.target.describe()}"
    elif parsed.kind == "L":
        reached = f"connections go to {parsed.destination()} from {route.target.describe()}"
    else:
        reached = f"connections go to {parsed.destination()} from this machine"
    close = f"close it with ssh_forward_close(forward_id={forward.forward_id!r}); ssh_forward_list shows its traffic"
    return f"listening on {forward.listen()} {side}; {reached}\n{close}"


def prepare_forward_list(registry: ForwardRegistry, max_output: int, owner: str) -> Plan:
    async def execute(progress: ProgressFn) -> Execution:
        forwards = registry.owned_by(owner)
        capture = BoundedCapture(max_output)
        capture.feed("\n".join(forward.summary() for forward in forwards).encode())
        return Execution(
            status="ok",
            output=capture.result(),
            headline=f"[{len(forwards)} forward{'s' if len(forwards) != 1 else ''}]",
            fields={"forwards": [forward.describe() for forward in forwards]},
        )

    return Plan(subject=Subject(fixed_tier=0), execute=execute)


def prepare_forward_close(registry: ForwardRegistry, owner: str, *, forward_id: str) -> Plan:
    forward = registry.get(owner, forward_id.strip())

    async def execute(progress: ProgressFn) -> Execution:
        await registry.close(forward, "closed by ssh_forward_close")
        traffic = forward.tunnel.traffic
        return Execution(
            status="ok",
            output=BoundedCapture(1).result(),
            headline=(
                f"[closed {forward.forward_id} | {traffic.to_destination} B to / {traffic.from_destination} B from "
                f"the destination, {traffic.connections} connection{'s' if traffic.connections != 1 else ''}]"
            ),
            fields={"forward": forward.describe(), "forward_id": forward.forward_id},
        )

    target = {
        "host": forward.host,
        "via": forward.via,
        "forward_id": forward.forward_id,
        "spec": forward.spec.text(forward.tunnel.listen_port),
    }
    return Plan(subject=Subject(fixed_tier=1), execute=execute, target=target)
