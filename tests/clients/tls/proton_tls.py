"""python-qpid-proton (AMQP 1.0) over AMQPS (issue 42): the 1.0 header inside the TLS stream is
detected as on the plain port; SASL EXTERNAL logs the client certificate's CN (guest) in; a
message to an exchange address that no queue is bound to comes back settled `released`, as RabbitMQ 4
settles it. Usage: proton_tls.py AMQPS_PORT CERTS_DIR."""
import os
import sys

from proton import Disposition, Message, SSLDomain
from proton.utils import BlockingConnection, SendException

port, certs = int(sys.argv[1]), sys.argv[2]
domain = SSLDomain(SSLDomain.MODE_CLIENT)
domain.set_trusted_ca_db(os.path.join(certs, "ca.pem"))
domain.set_peer_authentication(SSLDomain.VERIFY_PEER_NAME)
domain.set_credentials(os.path.join(certs, "guest.pem"), os.path.join(certs, "guest.key"), None)
conn = BlockingConnection(f"amqps://localhost:{port}", ssl_domain=domain, allowed_mechs="EXTERNAL", timeout=10)
sender = conn.create_sender("/exchanges/amq.fanout")
try:
    sender.send(Message(body=b"over tls"))
    raise AssertionError("no queue is bound to amq.fanout: the message must not be accepted")
except SendException as settled:
    assert settled.state == Disposition.RELEASED, settled.state
conn.close()
print("proton over AMQPS with EXTERNAL ok")
