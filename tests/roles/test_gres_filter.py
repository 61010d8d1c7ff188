"""roles/slurm_node/filter_plugins/gres.py: gres.conf's GPU lines from the nvidia role's placements."""

from tests.conftest import REPO, filter_plugins

gres_gpu_lines = filter_plugins(REPO / "roles/slurm_node/filter_plugins/gres.py")["gres_gpu_lines"]


def test_without_placements_one_line_covers_the_device_files():
    assert gres_gpu_lines([], "h100", 2) == ["Name=gpu Type=h100 File=/dev/nvidia[0-1]"]
    assert gres_gpu_lines(None, "l40s", 1) == ["Name=gpu Type=l40s File=/dev/nvidia0"]
    assert gres_gpu_lines([], "", 0) == []


def test_the_local_clusters_fake_gpus_have_no_cores_so_keep_the_one_line():
    fake = [
        {"minor": 0, "bus_id": "00000000:18:00.0", "cores": None},
        {"minor": 1, "bus_id": "x", "cores": None},
    ]
    assert gres_gpu_lines(fake, "h100", 2) == ["Name=gpu Type=h100 File=/dev/nvidia[0-1]"]


def test_placements_give_each_gpu_its_file_and_cores():
    placed = [
        {"minor": 3, "bus_id": "00000000:68:00.0", "cores": [0, 1, 2, 3]},
        {"minor": 4, "bus_id": "00000000:69:00.0", "cores": [32, 33]},
    ]
    assert gres_gpu_lines(placed, "a100", 2) == [
        "Name=gpu Type=a100 File=/dev/nvidia3 Cores=0-3",
        "Name=gpu Type=a100 File=/dev/nvidia4 Cores=32-33",
    ]


def test_placements_that_do_not_match_the_declared_count_are_not_used():
    placed = [{"minor": 0, "bus_id": "a", "cores": [0]}]
    assert gres_gpu_lines(placed, "h100", 2) == ["Name=gpu Type=h100 File=/dev/nvidia[0-1]"]


def render_gres_conf(**variables) -> str:
    import jinja2

    env = jinja2.Environment(trim_blocks=True, undefined=jinja2.StrictUndefined)
    env.filters.update(filter_plugins(REPO / "roles/slurm_node/filter_plugins/gres.py"))
    env.filters.update(filter_plugins(REPO / "roles/slurm_client/filter_plugins/gpu_profiles.py"))
    template = env.from_string((REPO / "roles/slurm_node/templates/gres.conf.j2").read_text())
    return template.render(ansible_managed="managed", **variables)


def test_the_template_renders_both_forms_and_nothing_without_gpus():
    gpu = {"model": "h100", "count": 2}
    assert render_gres_conf(slurm_node_gpu=gpu) == "# managed\nName=gpu Type=h100 File=/dev/nvidia[0-1]\n"
    placed = [{"minor": i, "bus_id": "a", "cores": [i * 8]} for i in range(2)]
    assert render_gres_conf(slurm_node_gpu=gpu, nvidia_gpu_placements=placed).splitlines()[1:] == [
        "Name=gpu Type=h100 File=/dev/nvidia0 Cores=0",
        "Name=gpu Type=h100 File=/dev/nvidia1 Cores=8",
    ]
    assert render_gres_conf(slurm_node_gpu={"count": 0}) == "# managed\n"


def test_the_template_writes_links_from_the_nvidia_roles_matrix():
    gpu = {"model": "h100", "count": 2}
    placed = [{"minor": i, "bus_id": "a", "cores": [i * 8]} for i in range(2)]
    links = [[-1, 18], [18, -1]]
    rendered = render_gres_conf(slurm_node_gpu=gpu, nvidia_gpu_placements=placed, nvidia_gpu_links=links)
    assert rendered.splitlines()[1:] == [
        "Name=gpu Type=h100 File=/dev/nvidia0 Cores=0 Links=-1,18",
        "Name=gpu Type=h100 File=/dev/nvidia1 Cores=8 Links=18,-1",
    ]
