"""``tooldisco doctor`` checks what it claims: a CA variable is ok only when its file holds
mitmproxy's CA (the same certificate, by SHA-256 fingerprint, found anywhere in a bundle),
discovery that is off (``enabled: false``, ``passthrough``) is a failure, and any failure makes
the exit status non-zero. Throwaway CAs are made with ``cryptography``, as mitmproxy makes its own."""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from tooldisco import cli

ROOT = Path(__file__).resolve().parents[2]


def make_ca(name: str = "mitmproxy") -> x509.Certificate:
    """A self-signed CA certificate, as mitmproxy writes to mitmproxy-ca-cert.pem."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name), x509.NameAttribute(NameOID.ORGANIZATION_NAME, name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=365))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))


def pem(*certs: x509.Certificate) -> bytes:
    return b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certs)


def fingerprint(cert: x509.Certificate) -> str:
    return cert.fingerprint(hashes.SHA256()).hex()


@pytest.fixture
def confdir(tmp_path: Path) -> tuple[Path, x509.Certificate]:
    """A mitmproxy confdir holding a fresh CA: (confdir, its certificate)."""
    ca = make_ca()
    (tmp_path / "confdir").mkdir()
    (tmp_path / "confdir" / cli.CA_FILE).write_bytes(pem(ca))
    return tmp_path / "confdir", ca


def findings(lines: list[str], var: str) -> list[str]:
    """The line about ``var`` and its fix line, if any."""
    i = next(i for i, line in enumerate(lines) if f"{var}=" in line)
    return lines[i:i + 2] if i + 1 < len(lines) and lines[i + 1].startswith("      fix:") else lines[i:i + 1]


def test_fingerprints_scan_the_whole_bundle_and_read_der() -> None:
    certs = [make_ca(f"ca-{i}") for i in range(3)]
    bundle = b"# a comment\n" + pem(*certs[:2]) + b"\nsome text between\n" + pem(certs[2])
    assert cli.certificate_fingerprints(bundle) == [fingerprint(c) for c in certs]
    der = certs[1].public_bytes(serialization.Encoding.DER)
    assert cli.certificate_fingerprints(der) == [fingerprint(certs[1])]
    assert cli.certificate_fingerprints(b"not a certificate") == []


def test_a_bundle_lacking_the_ca_fails_with_its_fix(confdir) -> None:
    conf, _ = confdir
    bundle = conf.parent / "system-bundle.pem"
    bundle.write_bytes(pem(make_ca("public-1"), make_ca("public-2"), make_ca("public-3")))
    lines, problems = cli.doctor(cli.DEFAULT_CONFIG, conf, {"NODE_EXTRA_CA_CERTS": str(bundle)})
    assert problems == 1, lines
    line, fix = findings(lines, "NODE_EXTRA_CA_CERTS")
    assert line.startswith(f"FAIL  NODE_EXTRA_CA_CERTS={bundle} does not hold mitmproxy's CA (3 certificates")
    assert fix == f"      fix: export NODE_EXTRA_CA_CERTS={conf / cli.CA_FILE}"


def test_a_bundle_holding_the_ca_anywhere_is_ok(confdir) -> None:
    conf, ca = confdir
    bundle = conf.parent / "bundle.pem"
    bundle.write_bytes(pem(make_ca("public-1"), make_ca("public-2"), ca))  # last: the whole file is read
    lines, problems = cli.doctor(cli.DEFAULT_CONFIG, conf, {"SSL_CERT_FILE": str(bundle),
                                                            "NODE_EXTRA_CA_CERTS": str(conf / cli.CA_FILE)})
    assert problems == 0, lines
    assert findings(lines, "SSL_CERT_FILE") == [f"ok    SSL_CERT_FILE={bundle} holds mitmproxy's CA (one of 3 certificates)"]
    assert findings(lines, "NODE_EXTRA_CA_CERTS") == [f"ok    NODE_EXTRA_CA_CERTS={conf / cli.CA_FILE} holds mitmproxy's CA"]


def test_an_old_ca_with_the_same_name_is_not_the_ca(confdir) -> None:
    """A confdir made anew has a new CA: a copy of the old one no longer verifies the proxy."""
    conf, _ = confdir
    old = conf.parent / "old-ca.pem"
    old.write_bytes(pem(make_ca()))  # same subject, another key
    lines, problems = cli.doctor(cli.DEFAULT_CONFIG, conf, {"CODEX_CA_CERTIFICATE": str(old)})
    assert problems == 1 and "does not hold mitmproxy's CA (1 certificate," in findings(lines, "CODEX_CA_CERTIFICATE")[0]


def test_a_replacing_variable_is_told_to_keep_the_public_cas(confdir) -> None:
    conf, _ = confdir
    bundle = conf.parent / "system.pem"
    bundle.write_bytes(pem(make_ca("public")))
    lines, _ = cli.doctor(cli.DEFAULT_CONFIG, conf, {"REQUESTS_CA_BUNDLE": str(bundle)})
    fix = findings(lines, "REQUESTS_CA_BUNDLE")[1]
    assert f"cat {bundle} {conf / cli.CA_FILE} > {conf / 'bundle.pem'}" in fix


def test_variables_are_not_called_ok_before_the_ca_exists(tmp_path) -> None:
    lines, problems = cli.doctor(cli.DEFAULT_CONFIG, tmp_path, {"NODE_EXTRA_CA_CERTS": "/etc/hosts"})
    assert problems == 1, lines  # the CA itself
    assert not any(line.startswith("ok    NODE_EXTRA_CA_CERTS") for line in lines)
    assert any(line.startswith("note  not checked until mitmproxy's CA is there") for line in lines)


@pytest.mark.parametrize("yaml_text, words", [
    ("pipes:\n  tool_discovery:\n    strategy: tool-search\n", "enabled is false (left out of the file"),
    ("pipes:\n  tool_discovery:\n    enabled: false\n    strategy: tool-search\n", "enabled is false;"),
    ("pipes:\n  tool_discovery:\n    enabled: true\n    strategy: passthrough\n", "strategy passthrough"),
])
def test_discovery_off_is_a_failure(confdir, tmp_path, yaml_text, words) -> None:
    conf, _ = confdir
    config = tmp_path / "c.yaml"
    config.write_text(yaml_text)
    lines, problems = cli.doctor(config, conf, {})
    assert problems == 1, lines
    [fail] = [line for line in lines if line.startswith("FAIL")]
    assert words in fail, fail
    assert lines[lines.index(fail) + 1] == f"      fix: set pipes.tool_discovery.{'strategy: tool-search (or relevance, api)' if 'passthrough' in words else 'enabled: true'} in {config}"


def test_discovery_off_in_the_shipped_passthrough_points_at_a_config_of_ones_own(confdir) -> None:
    conf, _ = confdir
    lines, problems = cli.doctor(cli.CONFIGS / "passthrough.yaml", conf, {})
    assert problems == 1
    fix = next(line for line in lines if line.startswith("      fix: set pipes.tool_discovery.strategy"))
    assert "tooldisco init" in fix and "site-packages" not in fix and str(cli.CONFIGS) not in fix


def _doctor(home: Path, conf: Path, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in cli.CA_VARS and k not in (
        "TOOLDISCO_CONFIG", "CONFIG", "XDG_CONFIG_HOME", "HTTPS_PROXY", "https_proxy")}
    return subprocess.run([sys.executable, "-m", "tooldisco.cli", "doctor", "--confdir", str(conf)],
                          capture_output=True, text=True, timeout=60, cwd=home, check=False,
                          env={**clean, "HOME": str(home), "PYTHONPATH": str(ROOT / "addon"), **env})


def test_the_command_exits_non_zero_for_a_bundle_lacking_the_ca_and_zero_with_it(confdir, tmp_path) -> None:
    conf, ca = confdir
    lacking = tmp_path / "lacking.pem"
    lacking.write_bytes(pem(make_ca("public-1"), make_ca("public-2")))
    bad = _doctor(tmp_path, conf, NODE_EXTRA_CA_CERTS=str(lacking))
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert f"FAIL  NODE_EXTRA_CA_CERTS={lacking} does not hold mitmproxy's CA" in bad.stdout
    assert "Traceback" not in bad.stderr and "1 problem" in bad.stderr
    holding = tmp_path / "holding.pem"
    holding.write_bytes(pem(make_ca("public-1"), ca))
    good = _doctor(tmp_path, conf, NODE_EXTRA_CA_CERTS=str(holding))
    assert good.returncode == 0, good.stdout + good.stderr
    assert f"ok    NODE_EXTRA_CA_CERTS={holding} holds mitmproxy's CA" in good.stdout
    # No config of one's own here: the shipped default, and the line says so.
    assert "(the shipped default; `tooldisco init` writes one of your own)" in good.stderr
