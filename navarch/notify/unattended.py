"""What an apply does for the people not watching it: the glue between the
CLI's apply and the notifier, metrics, status page, JSON logs and progress bar.

Sequence of one apply:
  run_apply(..., after_apply=side.after_apply)  notifications, under the lease (the
                                                notifier state is written by CAS)
  side.finish(side.run, error | None)          metrics textfile, pushgateway, status page
  side.summary(...)                             the final one-line summary (JSON logs)

Nothing here changes the apply's exit code: every failure is logged and counted.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import ExitStack
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from navarch import logs
from navarch.errors import LockHeld, NavarchError
from navarch.textsafe import counted

if TYPE_CHECKING:
    from navarch.notify.dispatch import Delivery
    from navarch.outcome import Outcome, RunResult
    from navarch.planner.model import Plan

log = logging.getLogger("navarch.run")


class Unattended:
    """One apply's side effects. fleet: navarch.reconcile.run.Fleet; run_id: the apply's
    (also every log line's); metrics_textfile: --metrics-textfile or None; pools: the
    --pool selection (None: all); progress: show a progress bar when stderr is a tty;
    clock: the run's clock (navarch.reconcile.run.Clock; default the system clock)."""

    def __init__(
        self,
        fleet: Any,
        run_id: str,
        *,
        metrics_textfile: str | None = None,
        pools: frozenset[str] | None = None,
        progress: bool = True,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.fleet = fleet
        self.clock = clock or (lambda: datetime.now(UTC))
        self.run_id = run_id
        self.metrics_textfile = metrics_textfile
        self.pools = pools
        self.show_progress = progress
        self.started = time.monotonic()
        self.deliveries: tuple[Delivery, ...] = ()
        #: What the apply did, as after_apply was handed it (None until then, or when it raised).
        self.run: RunResult | None = None
        self._stack = ExitStack()
        self._bar: Any = None

    # -- during the run -----------------------------------------------------------------
    def confirm(self, inner: Callable[[Plan], bool]) -> Callable[[Plan], bool]:
        """Wrap a confirm callback: once the plan is accepted, start the progress bar."""

        def run(plan: Plan) -> bool:
            ok = inner(plan)
            if ok:
                self._bar = self._stack.enter_context(
                    logs.progress(len(plan.actions), "applying", self.show_progress)
                )
            return ok

        return run

    def outcome(self, inner: Callable[[Outcome], None]) -> Callable[[Outcome], None]:
        """Wrap the per-outcome printer: also a log record (JSON logs) and a progress step."""

        def run(outcome: Outcome) -> None:
            inner(outcome)
            a = outcome.action
            log.info(
                "%s %s %s",
                a.kind.value,
                a.node or a.pool,
                "ok" if outcome.ok else "failed",
                extra={
                    "action": a.kind.value,
                    "pool": a.pool,
                    "node": a.node,
                    "ok": outcome.ok,
                    "detail": outcome.detail,
                },
            )
            if self._bar is not None:
                self._bar.advance()

        return run

    def close(self) -> None:
        """Stop the progress bar (idempotent)."""
        self._stack.close()
        self._bar = None

    def after_apply(self, result: RunResult | None, error: NavarchError | None) -> None:
        """run_apply's after_apply hook: send notifications (never raises); remembers the
        result (self.run) for finish() and summary()."""
        from navarch.notify.dispatch import notify_run

        self.run = result
        self.close()
        self.deliveries = notify_run(
            self.fleet.spec,
            self.fleet.store,
            now=self.clock(),
            run_id=self.run_id,
            result=result,
            error=error,
            pools=self.pools,
        )

    # -- after the run ------------------------------------------------------------------
    def finish(self, result: RunResult | None, error: BaseException | None) -> None:
        """Metrics (textfile, pushgateway) and the status page; failures are logged. A run
        that found the lease held did nothing: the run holding it reports; a partial run
        (Plan.partial) looked at too little of the fleet to report on it."""
        self.close()
        if isinstance(error, LockHeld):
            return
        if result is not None and result.plan.partial:
            return  # it saw a few reports, not the fleet: the last full run's figures stand
        spec = self.fleet.spec
        now = self.clock()
        if self.metrics_textfile or spec.metrics.pushgateway:
            from navarch.notify import metrics

            last = (
                metrics.previous_last_success(self.metrics_textfile, spec.name)
                if self.metrics_textfile
                else None
            )
            facts = metrics.RunFacts(
                result, now, time.monotonic() - self.started, self.deliveries, last
            )
            registry = metrics.build_registry(spec, facts)
            if self.metrics_textfile:
                try:
                    metrics.write_textfile(self.metrics_textfile, registry)
                except OSError as exc:
                    log.warning(
                        "cannot write the metrics textfile %s: %s",
                        self.metrics_textfile,
                        exc.strerror,
                    )
            metrics.push(spec, registry, facts.success)
        if spec.status_page and result is not None:
            from navarch.notify import status_page

            try:
                html = status_page.render_status_page(
                    spec,
                    result.plan,
                    result.memory,
                    now,
                    status_page.recent_events(self.fleet.store, spec.name),
                )
                status_page.publish(self.fleet.store, spec, html)
            except NavarchError as exc:
                log.warning("cannot write the status page: %s", exc)

    def summary(self, result: RunResult | None, exit_code: int) -> None:
        """The final one-line summary (a JSON line with --log-format json)."""
        outcomes = result.outcomes if result is not None else ()
        failed = sum(1 for o in outcomes if not o.ok)
        notified = sum(d.events for d in self.deliveries if d.ok)
        notify_failed = sum(1 for d in self.deliveries if not d.ok)
        logs.summary(
            f"apply finished: exit {exit_code}, {counted(len(outcomes) - failed, 'action')} ok, "
            f"{failed} failed, {counted(notified, 'notification')} sent, "
            f"{counted(notify_failed, 'sink')} failed",
            exit_code=exit_code,
            actions=len(outcomes),
            failed=failed,
            notifications_sent=notified,
            notification_failures=notify_failed,
            duration_s=round(time.monotonic() - self.started, 3),
        )
