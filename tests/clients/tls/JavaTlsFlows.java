// The RabbitMQ Java client over TLS against Hourglass: the broker's certificate verified against
// the test CA (chain and host name), then EXTERNAL with a client certificate from a PKCS#12
// keystore made by openssl (make_certs.sh), and PLAIN without one. Exits non-zero on a failure.
// Usage: JavaTlsFlows AMQPS_PORT CERT_DIR
import com.rabbitmq.client.*;
import java.io.FileInputStream;
import java.security.KeyStore;
import java.security.cert.CertificateFactory;
import javax.net.ssl.*;

public class JavaTlsFlows {
    static void check(boolean ok, String what) {
        if (!ok) throw new AssertionError(what);
    }

    /** Trusts only the test CA; presents the guest certificate when asked to. */
    static SSLContext context(String certs, boolean clientCert) throws Exception {
        KeyStore trust = KeyStore.getInstance("PKCS12");
        trust.load(null, null);
        try (FileInputStream ca = new FileInputStream(certs + "/ca.pem")) {
            trust.setCertificateEntry("ca", CertificateFactory.getInstance("X.509").generateCertificate(ca));
        }
        TrustManagerFactory tmf = TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
        tmf.init(trust);
        KeyManager[] keys = null;
        if (clientCert) {
            KeyStore identity = KeyStore.getInstance("PKCS12");
            try (FileInputStream p12 = new FileInputStream(certs + "/guest.p12")) {
                identity.load(p12, "changeit".toCharArray());
            }
            KeyManagerFactory kmf = KeyManagerFactory.getInstance(KeyManagerFactory.getDefaultAlgorithm());
            kmf.init(identity, "changeit".toCharArray());
            keys = kmf.getKeyManagers();
        }
        SSLContext ctx = SSLContext.getInstance("TLSv1.3");
        ctx.init(keys, tmf.getTrustManagers(), null);
        return ctx;
    }

    static ConnectionFactory factory(int port, SSLContext ctx) {
        ConnectionFactory factory = new ConnectionFactory();
        factory.setHost("localhost");
        factory.setPort(port);
        factory.setAutomaticRecoveryEnabled(false);
        factory.useSslProtocol(ctx);
        // amqp-client 5.0 has no enableHostnameVerification(): ask the JSSE for it directly.
        factory.setSocketConfigurator(socket -> {
            socket.setTcpNoDelay(true);
            if (socket instanceof SSLSocket) {
                SSLParameters p = ((SSLSocket) socket).getSSLParameters();
                p.setEndpointIdentificationAlgorithm("HTTPS");
                ((SSLSocket) socket).setSSLParameters(p);
            }
        });
        return factory;
    }

    static void roundTrip(Connection conn, String queue, String body) throws Exception {
        Channel ch = conn.createChannel();
        ch.queueDeclare(queue, false, false, false, null);
        ch.confirmSelect();
        ch.basicPublish("", queue, null, body.getBytes());
        check(ch.waitForConfirms(5000), "publish confirmed");
        GetResponse got = ch.basicGet(queue, true);
        check(got != null && new String(got.getBody()).equals(body), "message back over TLS");
    }

    public static void main(String[] args) throws Exception {
        int port = Integer.parseInt(args[0]);
        String certs = args[1];
        ConnectionFactory external = factory(port, context(certs, true));
        external.setSaslConfig(DefaultSaslConfig.EXTERNAL);
        try (Connection conn = external.newConnection()) {
            roundTrip(conn, "java-tls-external", "by certificate");
        }
        try (Connection conn = factory(port, context(certs, false)).newConnection()) {
            roundTrip(conn, "java-tls-plain", "server authenticated");
        }
        System.out.println("Java client over TLS: server verified, EXTERNAL, PLAIN: ok");
    }
}
