"""TLS for nng tcp endpoints: the certificate files ``minisgl keys new`` writes, and the configs.

A service's key directory holds a private CA's certificate (``ca.pem``; the CA's own key is
thrown away once it has signed, so nobody can issue more) and one member certificate with its
key (``cert.pem``, ``key.pem``), signed by that CA and valid as server and as client. Every
process of the service uses the same three files: a listener presents the certificate and
demands one from the client (mutual TLS), a dialer checks that the listener's certificate chains
to the CA and names ``minisgl``. A peer without a certificate from this CA fails the handshake.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path

import pynng

from minisgl_core.api import read_private, write_private

SERVER_NAME = "minisgl"  # the name in the member certificate, checked by every dialer
VALID_DAYS = 3650
CLOCK_SKEW = datetime.timedelta(days=1)  # hosts whose clocks differ by less still agree


@dataclass(frozen=True)
class TlsKeys:
    """The PEM texts of one key directory."""

    ca: str
    cert: str
    key: str

    @classmethod
    def load(cls, directory: Path) -> TlsKeys:
        """Read ``ca.pem``, ``cert.pem`` and ``key.pem``; ValueError naming a bad file."""
        texts = []
        for name in ("ca.pem", "cert.pem", "key.pem"):
            text = read_private(directory / name, "nng").decode("ascii", errors="replace")
            if "-----BEGIN " not in text:
                raise ValueError(f"transport 'nng': {directory / name} is not a PEM file")
            texts.append(text)
        return cls(*texts)

    def config(self, *, server: bool) -> pynng.TLSConfig:
        """A listener's (``server``) or a dialer's TLS config; both verify the other side."""
        tls = pynng.TLSConfig
        return tls(tls.MODE_SERVER if server else tls.MODE_CLIENT,
                   server_name=None if server else SERVER_NAME, ca_string=self.ca,
                   own_cert_string=self.cert, own_key_string=self.key,
                   auth_mode=tls.AUTH_MODE_REQUIRED)


def write_keys(directory: Path) -> list[Path]:
    """``minisgl keys new``: a private CA's certificate, a member certificate and its key."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)

    def builder(subject: x509.Name, issuer: x509.Name,
                key: ec.EllipticCurvePrivateKey) -> x509.CertificateBuilder:
        return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - CLOCK_SKEW)
                .not_valid_after(now + datetime.timedelta(days=VALID_DAYS)))

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "minisgl service CA")])
    ca = (builder(ca_name, ca_name, ca_key)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False,
                                       key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, key_cert_sign=True, crl_sign=True,
                                       encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    member_key = ec.generate_private_key(ec.SECP256R1())
    member_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, SERVER_NAME)])
    member = (builder(member_name, ca_name, member_key)
              .add_extension(x509.SubjectAlternativeName([x509.DNSName(SERVER_NAME)]),
                             critical=False)
              .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
              .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                    ExtendedKeyUsageOID.CLIENT_AUTH]),
                             critical=False)
              .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    key_pem = member_key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption())
    return [write_private(directory / "ca.pem", ca.public_bytes(pem)),
            write_private(directory / "cert.pem", member.public_bytes(pem)),
            write_private(directory / "key.pem", key_pem)]
