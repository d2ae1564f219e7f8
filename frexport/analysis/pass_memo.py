"""What a live analysis keeps from one pass to the next. Each part is given again, not worked out anew,
while all it was made from is the same: a busy job moves every rank's rows each pass, not its groups;
a hung one moves nothing."""

from __future__ import annotations

from dataclasses import dataclass, field

from frexport.analysis.lateness import StragglerMemo
from frexport.analysis.membership import MembershipMemo


@dataclass
class PassMemo:
    membership: MembershipMemo = field(default_factory=MembershipMemo)
    stragglers: StragglerMemo = field(default_factory=StragglerMemo)
