import os

from megahour.cluster import prereqs


def test_debian_and_ubuntu_are_installable_targets():
    assert prereqs.is_debian_like('ID=debian\nVERSION_ID="12"\n')
    assert prereqs.is_debian_like("ID=ubuntu\nID_LIKE=debian\n")
    assert prereqs.is_debian_like('ID=pop\nID_LIKE="ubuntu debian"\n')
    assert not prereqs.is_debian_like('ID="rocky"\nID_LIKE="rhel centos fedora"\n')


def test_dropin_sets_runc_and_grantable_ulimits():
    assert 'runtime = "runc"' in prereqs.DROPIN_TEXT
    assert 'default_ulimits = ["nofile=20000:20000", "nproc=4096:4096"]' in prereqs.DROPIN_TEXT


def test_check_flags_a_missing_or_edited_dropin(tmp_path):
    dropin = tmp_path / "50-megahour.conf"
    assert not prereqs.check(dropin).dropin_ok
    dropin.write_text(prereqs.DROPIN_TEXT.replace("runc", "crun"))
    report = prereqs.check(dropin)
    assert not report.dropin_ok and not report.ok
    assert any(str(dropin) in line for line in report.describe())


def test_install_writes_the_dropin_atomically_and_idempotently(tmp_path):
    dropin = tmp_path / "containers.conf.d" / "50-megahour.conf"
    logged = []
    old = os.umask(0o077)  # root's umask must not hide the settings from rootless podman users
    try:
        prereqs.install(prereqs.PrereqReport(), log=logged.append, dropin=dropin)
    finally:
        os.umask(old)
    assert dropin.read_text() == prereqs.DROPIN_TEXT
    assert dropin.stat().st_mode & 0o777 == 0o644
    prereqs.install(prereqs.PrereqReport(), log=logged.append, dropin=dropin)
    assert len(logged) == 1  # the second run changed nothing
    assert list(dropin.parent.iterdir()) == [dropin]  # no temporary files left behind


def test_manual_instructions_name_packages_and_settings():
    text = prereqs.manual_instructions(prereqs.PrereqReport(missing_commands=["runc", "debootstrap"]))
    assert "apt-get install runc debootstrap" in text
    assert str(prereqs.DROPIN_PATH) in text
