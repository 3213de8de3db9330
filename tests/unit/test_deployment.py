"""pipelines.cli.deployment.check_free: the main job refuses to start over another one's code server socket or a taken
UI port (before it resets anything), and clears the socket file a killed code server left."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from pipelines.cli.deployment import DeploymentError, Layout, check_free
from tests.support.net import free_port


def test_a_live_code_server_socket_means_another_main_job(tmp_path: Path) -> None:
    layout = Layout(tmp_path / "pipeline")
    layout.root.mkdir()
    with socket.socket(socket.AF_UNIX) as live:
        live.bind(str(layout.socket))
        live.listen(1)
        with pytest.raises(DeploymentError, match=r"code-server\.sock answers: another main job runs"):
            check_free(layout, free_port())
        assert layout.socket.exists()


def test_a_dead_code_server_socket_is_cleared(tmp_path: Path) -> None:
    layout = Layout(tmp_path / "pipeline")
    layout.root.mkdir()
    with socket.socket(socket.AF_UNIX) as dead:
        dead.bind(str(layout.socket))  # never listening: what a SIGKILLed server leaves
    check_free(layout, free_port())
    assert not layout.socket.exists()


def test_a_taken_ui_port_is_refused(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        with pytest.raises(DeploymentError, match=rf"port {port} on 127\.0\.0\.1 \(the UI\) is taken.*--port"):
            check_free(Layout(tmp_path / "pipeline"), port)
