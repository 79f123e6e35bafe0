"""The private root's plan: which real paths are bound (and how), and which symlinks are recreated."""

from __future__ import annotations

from sandbox_kernel.sandbox.oslayers.fsview import plan


def test_paths_are_bound_at_their_real_location_and_links_recreated(tmp_path):
    real = tmp_path / "usr" / "lib"
    real.mkdir(parents=True)
    (tmp_path / "lib").symlink_to("usr/lib")
    binds, links = plan([str(tmp_path / "lib"), str(tmp_path / "missing")], [])
    assert binds == {str(real): False}
    assert links == {str(tmp_path / "lib"): str(real)}  # the missing path is left out


def test_a_path_inside_a_bound_folder_of_the_same_mode_needs_no_mount(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    binds, _ = plan([str(tmp_path / "a" / "b"), str(tmp_path / "a")], [])
    assert binds == {str(tmp_path / "a"): False}


def test_a_writable_folder_inside_a_read_only_one_gets_its_own_mount_after_its_parent(tmp_path):
    (tmp_path / "ro" / "rw").mkdir(parents=True)
    binds, _ = plan([str(tmp_path / "ro")], [str(tmp_path / "ro" / "rw")])
    assert list(binds.items()) == [(str(tmp_path / "ro"), False), (str(tmp_path / "ro" / "rw"), True)]


def test_write_wins_over_read_for_the_same_path(tmp_path):
    binds, _ = plan([str(tmp_path)], [str(tmp_path)])
    assert binds == {str(tmp_path): True}


def test_a_sibling_with_a_common_prefix_is_not_inside(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data2").mkdir()
    binds, _ = plan([str(tmp_path / "data"), str(tmp_path / "data2")], [])
    assert set(binds) == {str(tmp_path / "data"), str(tmp_path / "data2")}


def test_a_dangling_link_is_neither_bound_nor_linked(tmp_path):
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    assert plan([str(tmp_path / "dangling")], []) == ({}, {})
