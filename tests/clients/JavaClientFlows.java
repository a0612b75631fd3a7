// The RabbitMQ Java client (Debian's librabbitmq-client-java), as a new user would use it:
// confirms, consume with acks, basic.get, a 404 that closes only the channel, TTL + dead-lettering
// with x-death, the delayed-message exchange, and RabbitMQ 4.3's consumer timeout (handleCancel
// runs, the channel stays open). Exits non-zero on the first failed check.
import com.rabbitmq.client.*;
import java.util.*;
import java.util.concurrent.*;

public class JavaClientFlows {
    static void check(boolean ok, String what) {
        if (!ok) throw new AssertionError(what);
    }

    public static void main(String[] args) throws Exception {
        ConnectionFactory factory = new ConnectionFactory();
        factory.setHost("127.0.0.1");
        factory.setPort(Integer.parseInt(args[0]));
        factory.setAutomaticRecoveryEnabled(false);
        try (Connection conn = factory.newConnection()) {
            Channel ch = conn.createChannel();
            ch.queueDeclare("java-work", false, false, false, null);
            ch.confirmSelect();
            for (int i = 0; i < 20; i++) {
                ch.basicPublish("", "java-work", null, ("m" + i).getBytes());
            }
            check(ch.waitForConfirms(5000), "all publishes confirmed");

            GetResponse got = ch.basicGet("java-work", false);
            check(got != null && new String(got.getBody()).equals("m0"), "basic.get returns the first message");
            check(got.getMessageCount() == 19, "get-ok counts the rest: " + got.getMessageCount());
            ch.basicAck(got.getEnvelope().getDeliveryTag(), false);

            BlockingQueue<String> received = new LinkedBlockingQueue<>();
            Channel consumerChannel = conn.createChannel();
            consumerChannel.basicQos(5);
            consumerChannel.basicConsume("java-work", false, new DefaultConsumer(consumerChannel) {
                @Override
                public void handleDelivery(String tag, Envelope env, AMQP.BasicProperties props, byte[] body)
                        throws java.io.IOException {
                    received.add(new String(body));
                    getChannel().basicAck(env.getDeliveryTag(), false);
                }
            });
            for (int i = 1; i < 20; i++) {
                String body = received.poll(5, TimeUnit.SECONDS);
                check(("m" + i).equals(body), "consumed in order: " + body);
            }

            Channel doomed = conn.createChannel();
            try {
                doomed.queueDeclarePassive("java-missing");
                check(false, "passive declare of a missing queue fails");
            } catch (java.io.IOException e) {
                ShutdownSignalException s = (ShutdownSignalException) e.getCause();
                AMQP.Channel.Close close = (AMQP.Channel.Close) s.getReason();
                check(close.getReplyCode() == 404, "404: " + close.getReplyText());
                check(close.getReplyText().equals("NOT_FOUND - no queue 'java-missing' in vhost '/'"), close.getReplyText());
            }
            check(conn.isOpen(), "the connection survives a channel error");

            Channel dl = conn.createChannel();
            dl.exchangeDeclare("java-dlx", "fanout");
            dl.queueDeclare("java-dlq", false, false, false, null);
            dl.queueBind("java-dlq", "java-dlx", "");
            Map<String, Object> ttlArgs = new HashMap<>();
            ttlArgs.put("x-message-ttl", 100);
            ttlArgs.put("x-dead-letter-exchange", "java-dlx");
            dl.queueDeclare("java-ttl", false, false, false, ttlArgs);
            dl.basicPublish("", "java-ttl", null, "expiring".getBytes());
            GetResponse dead = null;
            for (int i = 0; i < 200 && dead == null; i++) {
                Thread.sleep(10);
                dead = dl.basicGet("java-dlq", true);
            }
            check(dead != null, "expired message reaches the DLQ");
            @SuppressWarnings("unchecked")
            List<Map<String, Object>> deaths = (List<Map<String, Object>>) dead.getProps().getHeaders().get("x-death");
            check(deaths.get(0).get("reason").toString().equals("expired"), "x-death reason expired");
            check(((Number) deaths.get(0).get("count")).longValue() == 1, "x-death count 1");

            Map<String, Object> delayedArgs = new HashMap<>();
            delayedArgs.put("x-delayed-type", "direct");
            dl.exchangeDeclare("java-delayed", "x-delayed-message", false, false, delayedArgs);
            dl.queueDeclare("java-later", false, false, false, null);
            dl.queueBind("java-later", "java-delayed", "k");
            Map<String, Object> headers = new HashMap<>();
            headers.put("x-delay", 300);
            long sent = System.nanoTime();
            dl.basicPublish("java-delayed", "k", new AMQP.BasicProperties.Builder().headers(headers).build(), "later".getBytes());
            check(dl.basicGet("java-later", true) == null, "a delayed message is not there yet");
            GetResponse later = null;
            while (later == null && System.nanoTime() - sent < 5_000_000_000L) {
                Thread.sleep(10);
                later = dl.basicGet("java-later", true);
            }
            long waitedMs = (System.nanoTime() - sent) / 1_000_000;
            check(later != null && waitedMs >= 290, "delayed message after its delay: " + waitedMs + " ms");

            // RabbitMQ 4.3's x-consumer-timeout: a delivery not acked in time goes back to the queue,
            // and the client (it announces consumer_cancel_notify) hears basic.cancel; the channel
            // stays open.
            Channel slow = conn.createChannel();
            Map<String, Object> timeoutArgs = new HashMap<>();
            timeoutArgs.put("x-queue-type", "quorum");
            timeoutArgs.put("x-consumer-timeout", 500);
            slow.queueDeclare("java-timeout", true, false, false, timeoutArgs);
            slow.basicPublish("", "java-timeout", null, "slow job".getBytes());
            BlockingQueue<Long> delivered = new LinkedBlockingQueue<>();
            BlockingQueue<String> cancelled = new LinkedBlockingQueue<>();
            slow.basicConsume("java-timeout", false, "java-slow", new DefaultConsumer(slow) {
                @Override
                public void handleDelivery(String tag, Envelope env, AMQP.BasicProperties props, byte[] body) {
                    delivered.add(System.nanoTime());
                }

                @Override
                public void handleCancel(String tag) {
                    cancelled.add(tag + "@" + System.nanoTime());
                }
            });
            Long deliveredAt = delivered.poll(5, TimeUnit.SECONDS);
            check(deliveredAt != null, "the slow job was delivered");
            String cancel = cancelled.poll(5, TimeUnit.SECONDS);
            check(cancel != null && cancel.startsWith("java-slow@"), "handleCancel after the consumer timeout: " + cancel);
            long afterMs = (Long.parseLong(cancel.substring(cancel.indexOf('@') + 1)) - deliveredAt) / 1_000_000;
            check(afterMs >= 490 && afterMs < 1500, "cancelled after the timeout: " + afterMs + " ms");
            check(slow.isOpen(), "the channel stays open after a consumer timeout");
            GetResponse again = slow.basicGet("java-timeout", true);
            check(again != null && again.getEnvelope().isRedeliver(), "the timed-out message is back, redelivered");
            slow.queueDelete("java-timeout");

            ch.queueDelete("java-work");
        }
        System.out.println("java client flows ok");
    }
}
