"""Pools that span providers in fleet.yaml (placements:, placement:, prices:)."""

from __future__ import annotations

from pathlib import Path

import pytest

from navarch.errors import ConfigError
from navarch.fleet.load import load_fleet

TWO = """\
fleet: demo
providers:
  a: {type: aws, region: us-east-1}
  g: {type: gcp, project: proj-one}
prices:
  a: {p5.48xlarge: 4.00}
  g: {a3-highgpu-8g: 3.50}
pools:
  train:
    placement: ordered
    placements:
      - provider: a
        region: us-east-1
        zones: [us-east-1a, us-east-1b]
        instance_types: [p5.48xlarge]
        aws: {ami: ami-0123456789abcdef0}
      - provider: g
        zones: [us-central1-a]
        instance_types: [a3-highgpu-8g]
        capacity: spot
        gcp: {image: projects/p/global/images/i}
    nodes: {target: 2}
"""


def _load(tmp_path: Path, text: str):
    path = tmp_path / "fleet.yaml"
    path.write_text(text)
    return load_fleet(path)


def test_placements_keep_their_own_settings_and_launch_hash(tmp_path):
    pool = _load(tmp_path, TWO).pool("train")
    a, g = pool.placed()
    assert (a.provider_type, g.provider_type) == ("aws", "gcp")
    assert g.capacity == "spot" and a.capacity == "on-demand"
    # the first placement is also the pool's flat view (single-provider code reads it)
    assert (pool.provider, pool.placed()[0].zones) == ("a", ("us-east-1a", "us-east-1b"))
    assert [(p.provider, p.zone) for p in pool.launch_places()] == [
        ("a", "us-east-1a"),
        ("a", "us-east-1b"),
        ("g", "us-central1-a"),
    ]
    assert dict(pool.launch_settings(1))["image"] == '"projects/p/global/images/i"'
    assert pool.launch_hash(0) != pool.launch_hash(1)
    assert pool.placement_of("g", "us-central1-a", "a3-highgpu-8g") == (1, g)
    assert pool.placement_of("g", "us-central1-f", "a3-highgpu-8g") == (1, g)  # zone removed
    assert pool.placement_of("x", "us-central1-a", "a3-highgpu-8g") is None


def test_cheapest_orders_by_price_per_gpu_hour(tmp_path):
    pool = _load(tmp_path, TWO.replace("placement: ordered", "placement: cheapest")).pool("train")
    assert [p.provider for p in pool.launch_places()] == ["g", "a", "a"]
    assert pool.places()[0] == ("us-central1-a", "a3-highgpu-8g", True)


@pytest.mark.parametrize(
    ("mutation", "key_path", "words"),
    [
        (
            lambda t: t.replace(
                "    placement: ordered\n", "    provider: a\n    placement: ordered\n"
            ),
            "pools.train.provider",
            "declares provider in each placement",
        ),
        (
            lambda t: t.replace("    placement: ordered\n    placements:", "    placements_:"),
            "pools.train",
            "unknown key",
        ),
        (
            lambda t: t.replace("      - provider: g\n", "      - provider: z\n"),
            "pools.train.placements[1].provider",
            "provider 'z', which is not declared",
        ),
        (
            lambda t: t.replace(
                "        gcp: {image",
                "        aws: {ami: ami-0123456789abcdef0}\n        gcp: {image",
            ),
            "pools.train.placements[1].aws",
            "its provider is of type gcp",
        ),
        (
            lambda t: t.replace(
                "        capacity: spot\n", "        capacity: spot\n        gpus_per_node: 4\n"
            ),
            "pools.train.placements[1].gpus_per_node",
            "differs from the pool's 8",
        ),
        (
            lambda t: t.replace("placement: ordered", "placement: cheapest").replace(
                "  g: {a3-highgpu-8g: 3.50}\n", ""
            ),
            "prices.g",
            "no price for a3-highgpu-8g",
        ),
        (
            lambda t: t.replace("placement: ordered", "placement: no-such-scorer"),
            "pools.train.placement",
            "neither ordered, cheapest nor an installed navarch.placement",
        ),
    ],
)
def test_placement_errors_name_the_key(tmp_path, mutation, key_path, words):
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, mutation(TWO))
    text = str(err.value)
    assert key_path in text and words in text, text


def test_one_place_in_two_placements_is_refused(tmp_path):
    text = TWO.replace(
        "      - provider: g\n        zones: [us-central1-a]\n"
        "        instance_types: [a3-highgpu-8g]\n",
        "      - provider: a\n        zones: [us-east-1b]\n        instance_types: [p5.48xlarge]\n",
    ).replace("        gcp: {image: projects/p/global/images/i}\n", "")
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, text)
    assert "pools.train.placements[1].zones" in str(err.value)
    assert "already in placement 0" in str(err.value)


def test_a_pool_needs_a_provider_or_placements(tmp_path):
    text = (
        "fleet: demo\nproviders: {sim: {type: local}}\npools:\n  train:\n    nodes: {target: 1}\n"
    )
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, text)
    assert "pools.train" in str(err.value) and "no provider and no placements" in str(err.value)
