"""``python -m drlmpi.bench.progress``: whether the MPI moves a large message while its sender
computes (the question behind central's simulators testing their sends)."""

from __future__ import annotations

from drlmpi.bench.progress import delays


class Sender:
    """Rank 1 as :func:`delays` sees its communicator: a send that completes on the third test."""

    rank = 1

    def __init__(self) -> None:
        self.tests = 0
        self.calls: list[str] = []

    def Barrier(self) -> None:  # noqa: N802 (MPI name)
        self.calls.append("Barrier")

    def Send(self, buf, dest, tag) -> None:  # noqa: N802
        self.calls.append(f"Send {tag}")

    def Isend(self, buf, dest, tag):  # noqa: N802
        self.calls.append(f"Isend {tag} {buf.nbytes}")
        outer = self

        class Request:
            def Test(self) -> bool:  # noqa: N802
                outer.tests += 1
                return outer.tests % 3 == 0

            def Wait(self) -> None:  # noqa: N802
                outer.calls.append("Wait")

        return Request()


def test_the_sender_posts_the_large_message_after_the_small_one_and_pushes_only_when_asked():
    plain, pushed = Sender(), Sender()
    assert delays(plain, 8_000, 0.0001, 0.0, 2) is None and plain.tests == 0
    assert plain.calls == ["Barrier", "Send 1", "Isend 2 8000", "Wait"] * 2
    delays(pushed, 8_000, 0.0001, 0.01, 2)
    assert pushed.tests == 6  # tested until the send completed, each repeat


def test_it_measures_a_delay_for_every_message_on_two_ranks(pool):
    got = pool.submit(2, "drlmpi.bench.progress:delays", nbytes=113_000, work_s=0.002, push_s=0.0005,
                      repeats=5).result()
    assert len(got) == 5 and all(0.0 <= d < 1.0 for d in got)
