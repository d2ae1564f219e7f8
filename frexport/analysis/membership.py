"""Which global ranks belong to which process group.

NCCL dumps say it in pg_config. gloo (torch 2.13) writes an empty placeholder,
so membership is rebuilt from what the dumps do hold: the default group spans
the world; any other group is made of the ranks that recorded ops in it. A
member of such a group that never used it (or whose records wrapped away)
cannot be seen, and the report says so in a note.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from frexport.model.rank_trace import RankTrace
from frexport.model.world import MAX_WORLD

DEFAULT_PG_DESC = "default_pg"


@dataclass(frozen=True)
class Group:
    key: str  # unique across the analysis: the PG name, or name@i when ranks disagree on a name's members
    name: str
    desc: str
    members: tuple[int, ...]  # global ranks in group-rank order

    def global_rank(self, local: int | None) -> int | None:
        if local is None or not 0 <= local < len(self.members):
            return None
        return self.members[local]

    @property
    def label(self) -> str:
        return f"{self.name} ({self.desc})" if self.desc else self.name


@dataclass
class Membership:
    groups: dict[str, Group]
    group_of: dict[tuple[int, str], str]  # (rank, pg_name) -> group key
    world_size: int
    world_size_inferred: bool
    notes: list[str]
    unplaced: tuple[int, ...] = ()  # ranks left out of the inferred world (placement.py): not the job's


def _is_default(name: str, desc: str) -> bool:
    return desc == DEFAULT_PG_DESC or (name == "0" and desc in ("", DEFAULT_PG_DESC))


class MembershipMemo:
    """A live analysis's last membership, given again while all it was built from is the same: each
    rank's pg_config (the very tuple, where its snapshot kept it), the names and descriptions of its
    groups, the ranks known and those behind. Building it walks every rank's configs and groups: a
    twentieth of a 16384-rank view's steady analysis, for the same groups pass after pass."""

    def __init__(self) -> None:
        self.key: tuple = ()  # (it holds what it compares: an identity stays theirs)
        self.membership: Membership | None = None

    def build(self, traces: dict[int, RankTrace], known_ranks: set[int],
              behind: dict[int, tuple[str, int]]) -> Membership:
        # the ranks behind count only where no config says how big the world is: where one did last time,
        # the same configs say it again (a busy job's ranks behind move every pass)
        groups = (tuple([(r, t.pg_config, {n: g.pg_desc for n, g in t.groups.items()})  # (a dict: in any order)
                         for r, t in traces.items()]), frozenset(known_ranks))
        ranks_behind = tuple(behind.items())
        m = self.membership
        if m is None or (*groups, ranks_behind if m.world_size_inferred else ()) != self.key:
            m = self.membership = build_membership(traces, known_ranks, behind)
            # kept as the next call makes it, by the membership just built (a key made before any membership,
            # holding the first pass's ranks behind, made the job view build the groups again on its second
            # pass: 0.06 s at 4096 ranks)
            self.key = (*groups, ranks_behind if m.world_size_inferred else ())
        return m


def build_membership(traces: dict[int, RankTrace], known_ranks: set[int] | None = None,
                     behind: dict[int, tuple[str, int]] | None = None) -> Membership:
    """`behind`: ranks whose records end before an op their peers completed and went past (placement.py):
    where no config says how big the world is, those beyond a gap after the other ranks do not stretch it."""
    notes: list[str] = []
    configs: dict[str, dict[tuple[int, ...], set[int]]] = {}  # name -> members -> ranks reporting it
    descs: dict[str, str] = {}
    # Ranks whose configs hold the same member tuple (a job-level view interns them) sort and hash it
    # once: a 4096-rank default group is 4096 members in every one of 4096 ranks' configs.
    reporting: dict[tuple[str, int], set[int]] = {}
    placeholder_ranks: set[int] = set()
    for rank, t in traces.items():
        for c in t.pg_config:
            if not c.name:
                # gloo's unnamed placeholder: it lists the ranks of the last group the process created
                # (torch 2.13 to 2.15): ranks that exist, no group's membership
                placeholder_ranks.update(c.ranks or ())
                continue
            descs.setdefault(c.name, c.desc)
            if c.ranks is not None:
                ranks = reporting.get((c.name, id(c.ranks)))  # (the traces keep the tuples alive meanwhile)
                if ranks is None:
                    ranks = reporting[(c.name, id(c.ranks))] = \
                        configs.setdefault(c.name, {}).setdefault(tuple(sorted(c.ranks)), set())
                ranks.add(rank)
    users: dict[str, set[int]] = {}
    for rank, t in traces.items():
        for name, g in t.groups.items():
            users.setdefault(name, set()).add(rank)
            descs.setdefault(name, g.pg_desc)

    _drop_outside_world(configs, descs, notes)
    world_from_config = None
    for name, variants in configs.items():
        if _is_default(name, descs.get(name, "")) and len(variants) == 1:
            world_from_config = len(next(iter(variants)))
    # (bounded: a file named rank 9999999)
    seen = {r for r in set(traces) | (known_ranks or set()) | placeholder_ranks if 0 <= r < MAX_WORLD}
    for variants in configs.values():
        for members in variants:
            seen.update(members)
    unplaced: tuple[int, ...] = ()
    if world_from_config is None and behind:
        current = seen - set(behind)
        top = max(current, default=-1)
        while top + 1 in behind:  # the job's own ranks dumped early (their numbers carry on the job's)
            top += 1
        unplaced = tuple(sorted(r for r in behind if current and r > top))
        if unplaced:
            seen -= set(unplaced)
            for ranks in users.values():
                ranks.difference_update(unplaced)
            name, seq = behind[unplaced[0]]
            notes.append(f"rank{'s' if len(unplaced) > 1 else ''} {', '.join(map(str, unplaced[:8]))}"
                         f"{', ...' if len(unplaced) > 8 else ''} not placed in the job: "
                         f"{'their' if len(unplaced) > 1 else 'its'} records of group {name!r} end before "
                         f"collective {seq}, which other ranks completed and went past, and "
                         f"{'their numbers lie' if len(unplaced) > 1 else 'its number lies'} beyond a gap after "
                         "the job's ranks (a dump from before, or not this job's)")
    world = world_from_config or (max(seen) + 1 if seen else 0)
    world_inferred = world_from_config is None

    groups: dict[str, Group] = {}
    group_of: dict[tuple[int, str], str] = {}
    inferred_names = []
    for name in sorted(set(configs) | set(users)):
        desc = descs.get(name, "")
        variants = configs.get(name, {})
        if len(variants) == 1:
            members = next(iter(variants))
            groups[name] = Group(name, name, desc, members)
            outside = sorted(users.get(name, set()) - set(members))
            if outside:  # hang.find_waits does not count their waits: a peer cannot invent a waiter
                notes.append(f"rank{'s' if len(outside) > 1 else ''} {', '.join(map(str, outside[:8]))}"
                             f"{', ...' if len(outside) > 8 else ''} recorded ops in process group {name!r} without "
                             "being among its members: not matched there")
            for r in set(members) | users.get(name, set()):
                group_of[(r, name)] = name
        elif len(variants) > 1:  # the same name for different member sets: one group per member set
            keys = {members: f"{name}@{i}" for i, members in enumerate(sorted(variants))}
            for members, key in keys.items():
                groups[key] = Group(key, name, desc, members)
                for r in members:
                    group_of[(r, name)] = key
            # a rank listed in two sets is in the one its own pg_config names: its ops were issued in that group
            for members, key in keys.items():
                for r in variants[members].intersection(members):
                    group_of[(r, name)] = key
            notes.append(f"process group {name!r} has {len(variants)} different member sets across ranks")
        else:
            if _is_default(name, desc):
                members = tuple(range(world))
            else:
                members = tuple(sorted(users.get(name, ())))
                inferred_names.append(name)
            groups[name] = Group(name, name, desc, members)
            for r in members:
                group_of[(r, name)] = name
    unrecorded = set(range(world)) - {r for r, t in traces.items() if t.groups}  # no dump, or one without entries
    _fill_short_groups(groups, group_of, inferred_names, unrecorded, notes)
    if inferred_names or (groups and world_inferred):
        notes.append(
            "process-group membership inferred from the recorded ops (the dumps' pg_config lists no ranks, "
            "as gloo writes it): a member that never recorded an op in a group is not visible")
    return Membership(groups, group_of, world, world_inferred, notes, unplaced)


def _fill_short_groups(groups: dict[str, Group], group_of: dict[tuple[int, str], str], inferred: list[str],
                       unrecorded: set[int], notes: list[str]) -> None:
    """Inferred groups of one kind (desc: tp, dp) split the world into groups of one size. Where one of
    them is short of that size by exactly the ranks without a record (no dump, or one holding no entry)
    that no group of its kind holds, those ranks are its missing members (a rank that left the job before
    its dump was taken, or dumped as it exited): without them, its waits would not say for whom they wait."""
    by_desc: dict[str, list[Group]] = {}
    for name in inferred:
        if groups[name].desc:
            by_desc.setdefault(groups[name].desc, []).append(groups[name])
    for desc, gs in by_desc.items():
        size = max(len(g.members) for g in gs)
        short = [g for g in gs if len(g.members) < size]
        orphans = sorted(unrecorded - {m for g in gs for m in g.members})
        if len(gs) < 2 or len(short) != 1 or size - len(short[0].members) != len(orphans) or not orphans:
            continue
        g = short[0]
        groups[g.key] = replace(g, members=tuple(sorted((*g.members, *orphans))))
        group_of.update(((r, g.name), g.key) for r in orphans)
        notes.append(f"process group {g.name!r} ({desc}) taken to include rank{'s' if len(orphans) > 1 else ''} "
                     f"{', '.join(map(str, orphans))} (no record): the other {desc} groups have {size} members, it "
                     f"had {len(g.members)}")


def _drop_outside_world(configs: dict[str, dict[tuple[int, ...], set[int]]], descs: dict[str, str],
                        notes: list[str]) -> None:
    """Member lists naming a rank outside the job are dropped (that rank's report of that group), not
    believed: one rank listing member 100000 in a 4-rank job would make a world of 100001 and call
    99997 ranks missing. The job's size is the default group's length most ranks report (else the
    bound of model/world.py); the other ranks' lists of the group still count."""
    lengths: dict[int, int] = {}
    by: set[int] | list[int]  # (for mypy) the ranks that list a member set, then those sorted
    for name, variants in configs.items():
        if _is_default(name, descs.get(name, "")):
            for members, by in variants.items():
                lengths[len(members)] = lengths.get(len(members), 0) + len(by)
    world = max(lengths, key=lambda n: (lengths[n], -n)) if lengths else MAX_WORLD
    for name, variants in list(configs.items()):
        for members in [m for m in variants if m and m[-1] >= world]:  # sorted: the last is the largest
            by = sorted(variants.pop(members))
            notes.append(f"rank{'s' if len(by) > 1 else ''} {', '.join(map(str, by[:8]))}"
                         f"{', ...' if len(by) > 8 else ''} list{'' if len(by) > 1 else 's'} rank {members[-1]} "
                         f"in process group {name!r}, outside the job's {world} ranks: that member list is ignored")
        if not variants:
            del configs[name]
