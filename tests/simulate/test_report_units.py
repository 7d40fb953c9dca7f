"""`navarch simulate`'s terminal summary names units; its plots keep their labels inside."""

from __future__ import annotations

from typing import Any

import pytest

from navarch.simulate import report


def test_durations_print_in_minutes_under_a_name_without_seconds() -> None:
    rows = dict(
        report.summary_rows(
            {"p50_fault_to_cordon_s": 3000, "p95_fault_to_serving_s": 6930.0, "faults": 4}
        )
    )
    assert rows["p50_fault_to_cordon"] == "50 min"
    assert rows["p95_fault_to_serving"] == "115.5 min"
    assert rows["max_fault_to_serving"] == "n/a"
    assert rows["faults"] == "4"
    assert not any(k.endswith("_s") for k in rows)


def test_every_axis_and_tick_label_fits_inside_its_plot(monkeypatch: pytest.MonkeyPatch) -> None:
    figures: list[Any] = []
    monkeypatch.setattr(report, "_svg", lambda fig: figures.append(fig) or "<svg/>")
    doc = {
        "series": [
            {"t_s": h * 3600, "serving": 95 + h % 5, "target": 100, "instances": 101}
            for h in range(48)
        ],
        "timeline": [
            {"t": h * 3600, "kind": kind}
            for h, kind in enumerate(
                (
                    "fault:xid_79_gpu_fallen_off_the_bus",
                    "cordon",
                    "terminate",
                    "capacity_exhausted_every_zone",
                )
            )
        ],
        "fault_to_cordon_s": [600, 1200, 3000],
        "fault_to_serving_s": [1800, 6900],
    }
    report.plots(doc)
    assert len(figures) == 3
    for fig in figures:
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        width, height = fig.bbox.width, fig.bbox.height
        for ax in fig.axes:
            box = ax.get_tightbbox(renderer)  # everything drawn for the axes, labels too
            assert box.x0 >= -1 and box.y0 >= -1, [t.get_text() for t in ax.get_yticklabels()]
            assert box.x1 <= width + 1 and box.y1 <= height + 1
