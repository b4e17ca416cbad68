// The Java producer (kafka-clients) as the comparison drives it: its own defaults plus whatever
// key=value settings the harness passes, keyless records, per-message outcomes on stdout.
//
//   java -cp ... JavaProducer steady BOOTSTRAP TOPIC RATE_PER_S DURATION_S VALUE_BYTES [k=v ...]
//   java -cp ... JavaProducer burst  BOOTSTRAP TOPIC COUNT      0          VALUE_BYTES [k=v ...]
//
// Output (read by bench/compare/programs.py; sarama/main.go prints the same): "start" once the
// producer exists and the clock starts; after flush and close, "sent N", "block_us B" (longest
// send() call) and one line per message, "a ID PARTITION SEND_US ACK_US" or
// "e ID - SEND_US ACK_US ERROR" (microseconds since start); in burst mode "elapsed_us E" and
// "acked K" instead of the per-message lines.

import java.io.BufferedWriter;
import java.io.OutputStreamWriter;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.Properties;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class JavaProducer {
    public static void main(String[] args) throws Exception {
        String mode = args[0];
        Properties props = new Properties();
        props.put("bootstrap.servers", args[1]);
        String topic = args[2];
        double amount = Double.parseDouble(args[3]);
        double durationS = Double.parseDouble(args[4]);
        int valueBytes = Integer.parseInt(args[5]);
        for (int i = 6; i < args.length; i++) {
            int eq = args[i].indexOf('=');
            props.put(args[i].substring(0, eq), args[i].substring(eq + 1));
        }
        BufferedWriter out = new BufferedWriter(
            new OutputStreamWriter(System.out, StandardCharsets.US_ASCII), 1 << 16);
        int capacity = mode.equals("steady") ? (int) Math.ceil(amount * durationS) : (int) amount;
        long[] sendUs = new long[capacity];
        long[] ackUs = new long[capacity];
        int[] partition = new int[capacity];
        String[] error = new String[capacity];
        Arrays.fill(ackUs, -1L);
        int sent = 0;
        long longestBlockNs = 0;
        long t0;
        try (KafkaProducer<byte[], byte[]> producer =
                 new KafkaProducer<>(props, new ByteArraySerializer(), new ByteArraySerializer())) {
            // Metadata first, as the Python contenders do before their clocks start.
            producer.partitionsFor(topic);
            out.write("start\n");
            out.flush();
            t0 = System.nanoTime();
            final long start = t0;
            long endNs = (long) (durationS * 1e9);
            for (int i = 0; i < capacity; i++) {
                long now = System.nanoTime() - start;
                if (mode.equals("steady")) {
                    if (now >= endNs) {
                        break;
                    }
                    long due = (long) (i * 1e9 / amount);
                    if (due > now) {
                        Thread.sleep((due - now) / 1_000_000, (int) ((due - now) % 1_000_000));
                    }
                }
                byte[] value = new byte[valueBytes];
                Arrays.fill(value, (byte) 'x');
                byte[] id = String.format("%010d", i).getBytes(StandardCharsets.US_ASCII);
                System.arraycopy(id, 0, value, 0, Math.min(id.length, valueBytes));
                final int n = i;
                long before = System.nanoTime();
                sendUs[n] = (before - start) / 1000;
                producer.send(new ProducerRecord<>(topic, value), (md, exc) -> {
                    ackUs[n] = (System.nanoTime() - start) / 1000;
                    if (exc != null) {
                        error[n] = exc.getClass().getSimpleName();
                    } else {
                        partition[n] = md.partition();
                    }
                });
                longestBlockNs = Math.max(longestBlockNs, System.nanoTime() - before);
                sent = i + 1;
            }
            producer.flush();
        }
        long elapsedUs = (System.nanoTime() - t0) / 1000;
        out.write("sent " + sent + "\n");
        out.write("block_us " + longestBlockNs / 1000 + "\n");
        if (mode.equals("burst")) {
            int acked = 0;
            for (int i = 0; i < sent; i++) {
                if (ackUs[i] >= 0 && error[i] == null) {
                    acked++;
                }
            }
            out.write("elapsed_us " + elapsedUs + "\n");
            out.write("acked " + acked + "\n");
        } else {
            for (int i = 0; i < sent; i++) {
                if (error[i] != null) {
                    out.write("e " + i + " - " + sendUs[i] + " " + ackUs[i] + " " + error[i] + "\n");
                } else if (ackUs[i] >= 0) {
                    out.write("a " + i + " " + partition[i] + " " + sendUs[i] + " " + ackUs[i] + "\n");
                }
            }
        }
        out.flush();
    }
}
