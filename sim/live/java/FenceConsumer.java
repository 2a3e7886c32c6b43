// A member of sim/live/fence_load.py played by Apache Kafka's own Java KafkaConsumer (kafka-clients),
// beside the librdkafka ones: the other client whose requests the broker judges. It consumes, commits
// after every poll that returned records (one in four commitSync, the others commitAsync, every
// partition it has read), commits synchronously in onPartitionsRevoked (and, as the default
// onPartitionsLost does, when its partitions are lost), and reports each answer on stdout as
// "commit <Kafka error name>"; "joined" once it holds partitions. The parent stops it (SIGSTOP)
// past its session timeout and continues it.
//
// Arguments: bootstrap group clientId topic protocol(consumer|classic) assignor(range|cooperative|-)
//            instanceId(-: none) seed
import java.time.Duration;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Random;

import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.protocol.Errors;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public final class FenceConsumer {
    private static final Map<TopicPartition, OffsetAndMetadata> READ = new HashMap<>();

    private static synchronized void report(String line) {
        System.out.println(line);
        System.out.flush();
    }

    private static String name(Exception e) {
        Throwable t = e;
        while (t.getCause() != null && Errors.forException(t) == Errors.UNKNOWN_SERVER_ERROR) {
            t = t.getCause();
        }
        Errors err = Errors.forException(t);
        return err == Errors.UNKNOWN_SERVER_ERROR ? "_" + t.getClass().getSimpleName() : err.name();
    }

    private static Map<TopicPartition, OffsetAndMetadata> read(Collection<TopicPartition> of) {
        Map<TopicPartition, OffsetAndMetadata> out = new HashMap<>();
        for (TopicPartition tp : of) {
            if (READ.containsKey(tp)) {
                out.put(tp, READ.get(tp));
            }
        }
        return out;
    }

    private static void commitSync(KafkaConsumer<byte[], byte[]> c, Map<TopicPartition, OffsetAndMetadata> offsets) {
        if (offsets.isEmpty()) {
            return;
        }
        try {
            c.commitSync(offsets);
            report("commit NONE");
        } catch (Exception e) {
            report("commit " + name(e));
        }
    }

    public static void main(String[] a) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", a[0]);
        p.put("group.id", a[1]);
        p.put("client.id", a[2]);
        p.put("group.protocol", a[4]);
        p.put("enable.auto.commit", "false");
        p.put("auto.offset.reset", "earliest");
        p.put("key.deserializer", ByteArrayDeserializer.class.getName());
        p.put("value.deserializer", ByteArrayDeserializer.class.getName());
        if (a[4].equals("classic")) {
            p.put("session.timeout.ms", "2000");
            p.put("heartbeat.interval.ms", "500");
            p.put("partition.assignment.strategy", a[5].equals("range")
                    ? "org.apache.kafka.clients.consumer.RangeAssignor"
                    : "org.apache.kafka.clients.consumer.CooperativeStickyAssignor");
        }
        if (!a[6].equals("-")) {
            p.put("group.instance.id", a[6]);
        }
        Random rng = new Random(Long.parseLong(a[7]));
        KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p);
        c.subscribe(List.of(a[3]), new ConsumerRebalanceListener() {
            @Override
            public void onPartitionsRevoked(Collection<TopicPartition> parts) {
                commitSync(c, read(parts));  // commit on revoke (also on lost: the default onPartitionsLost)
                READ.keySet().removeAll(parts);
            }

            @Override
            public void onPartitionsAssigned(Collection<TopicPartition> parts) {
            }
        });
        boolean joined = false;
        while (true) {
            ConsumerRecords<byte[], byte[]> records;
            try {
                records = c.poll(Duration.ofMillis(100));
            } catch (Exception e) {  // fenced, rebalancing: the consumer rejoins on the next poll
                report("poll " + name(e));
                continue;
            }
            if (!joined && !c.assignment().isEmpty()) {
                joined = true;
                report("joined");
            }
            if (records.isEmpty()) {
                continue;
            }
            for (ConsumerRecord<byte[], byte[]> r : records) {
                READ.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
            }
            Map<TopicPartition, OffsetAndMetadata> offsets = read(c.assignment());
            if (rng.nextInt(4) == 0) {
                commitSync(c, offsets);
            } else if (!offsets.isEmpty()) {
                c.commitAsync(offsets, (o, e) -> report("commit " + (e == null ? "NONE" : name(e))));
            }
            Thread.sleep(400);
        }
    }
}
