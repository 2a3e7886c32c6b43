package dev.fencewatch.streams;

import java.time.Duration;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;

/**
 * fencewatch's Kafka Streams application (issue 45): one stateful topology under the streams
 * rebalance protocol (KIP-1071), for tests and benches against a real broker.
 *
 * <p>Topology: read {@code input} (String key, String value), re-key every record by its value
 * (a repartition topic, so the topology has two subtopologies), count per key in the state store
 * {@code counts} (a changelog topic), write the counts to {@code output} (String key, Long value).
 *
 * <p>Settings, each as {@code --name=value} or as the environment variable in brackets (a flag
 * wins): {@code --bootstrap-servers} [FENCEWATCH_STREAMS_BOOTSTRAP_SERVERS], {@code --application-id}
 * [..._APPLICATION_ID], {@code --input} [..._INPUT], {@code --output} [..._OUTPUT],
 * {@code --group-protocol} [..._GROUP_PROTOCOL] (default {@code streams}), {@code --processing-guarantee}
 * [..._PROCESSING_GUARANTEE] ({@code exactly_once_v2} or {@code at_least_once}, default the
 * former), {@code --num-stream-threads} [..._NUM_STREAM_THREADS], {@code --commit-interval-ms}
 * [..._COMMIT_INTERVAL_MS], {@code --state-dir} [..._STATE_DIR], {@code --client-id} [..._CLIENT_ID];
 * and any Streams, consumer or producer setting as {@code --config=name=value} (repeatable).
 *
 * <p>It prints one line per event a test waits for, on stdout, each starting with
 * {@code fencewatch-streams }: {@code started}, {@code state=NEW->RUNNING}, {@code error=...} (an
 * uncaught exception; the thread is replaced) and {@code stopped} (or {@code stopped
 * close-timed-out-after=30s} when {@code KafkaStreams.close} did not finish in time). Bad settings: one line on
 * stderr, exit 2; the client in state ERROR: exit 1.
 */
public final class StreamsApp {

    static final String PREFIX = "fencewatch-streams ";
    static final String ENV_PREFIX = "FENCEWATCH_STREAMS_";
    static final String STORE = "counts";
    static final int CLOSE_TIMEOUT_S = 30;

    private static final String[] NAMES = {
        "bootstrap-servers", "application-id", "input", "output", "group-protocol",
        "processing-guarantee", "num-stream-threads", "commit-interval-ms", "state-dir", "client-id",
    };

    private StreamsApp() {
    }

    /** The topology: input -> selectKey(value) -> repartition -> count (store "counts") -> output. */
    static Topology topology(String input, String output) {
        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(input, Consumed.with(Serdes.String(), Serdes.String()))
            .selectKey((key, value) -> value)
            .groupByKey(Grouped.with("by-value", Serdes.String(), Serdes.String()))
            .count(Materialized.as(STORE))
            .toStream()
            .to(output, Produced.with(Serdes.String(), Serdes.Long()));
        return builder.build();
    }

    static final class Usage extends RuntimeException {
        Usage(String message) {
            super(message);
        }
    }

    /** Flags over environment; {@code --config=k=v} pass-through settings go to "config." keys. */
    static Map<String, String> settings(String[] args, Map<String, String> env) {
        Map<String, String> out = new TreeMap<>();
        for (String name : NAMES) {
            String value = env.get(ENV_PREFIX + name.replace('-', '_').toUpperCase(Locale.ROOT));
            if (value != null && !value.isBlank()) {
                out.put(name, value.trim());
            }
        }
        for (String arg : args) {
            if (!arg.startsWith("--") || !arg.contains("=")) {
                throw new Usage("expected --name=value, got '" + arg + "'");
            }
            String name = arg.substring(2, arg.indexOf('='));
            String value = arg.substring(arg.indexOf('=') + 1);
            if (name.equals("config")) {
                int eq = value.indexOf('=');
                if (eq <= 0) {
                    throw new Usage("expected --config=name=value, got '" + arg + "'");
                }
                out.put("config." + value.substring(0, eq), value.substring(eq + 1));
            } else if (java.util.Arrays.asList(NAMES).contains(name)) {
                out.put(name, value);
            } else {
                throw new Usage("unknown setting --" + name + "; valid: --" + String.join(", --", NAMES) + ", --config");
            }
        }
        for (String required : new String[] {"bootstrap-servers", "application-id", "input", "output"}) {
            if (!out.containsKey(required)) {
                throw new Usage("missing --" + required + " (or " + ENV_PREFIX
                    + required.replace('-', '_').toUpperCase(Locale.ROOT) + ")");
            }
        }
        String guarantee = out.getOrDefault("processing-guarantee", StreamsConfig.EXACTLY_ONCE_V2);
        if (!guarantee.equals(StreamsConfig.EXACTLY_ONCE_V2) && !guarantee.equals(StreamsConfig.AT_LEAST_ONCE)) {
            throw new Usage("unknown processing guarantee '" + guarantee + "'; valid: exactly_once_v2, at_least_once");
        }
        out.put("processing-guarantee", guarantee);
        String protocol = out.getOrDefault("group-protocol", "streams");
        if (!protocol.equals("streams") && !protocol.equals("classic")) {
            throw new Usage("unknown group protocol '" + protocol + "'; valid: streams, classic");
        }
        out.put("group-protocol", protocol);
        for (String number : new String[] {"num-stream-threads", "commit-interval-ms"}) {
            if (out.containsKey(number)) {
                try {
                    Integer.parseInt(out.get(number));
                } catch (NumberFormatException e) {
                    throw new Usage("--" + number + " must be an integer, got '" + out.get(number) + "'");
                }
            }
        }
        return out;
    }

    static Properties properties(Map<String, String> s) {
        Properties p = new Properties();
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, s.get("bootstrap-servers"));
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, s.get("application-id"));
        p.put(StreamsConfig.GROUP_PROTOCOL_CONFIG, s.get("group-protocol"));
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, s.get("processing-guarantee"));
        p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, s.getOrDefault("num-stream-threads", "1"));
        if (s.containsKey("commit-interval-ms")) {
            p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, s.get("commit-interval-ms"));
        }
        if (s.containsKey("state-dir")) {
            p.put(StreamsConfig.STATE_DIR_CONFIG, s.get("state-dir"));
        }
        if (s.containsKey("client-id")) {
            p.put(StreamsConfig.CLIENT_ID_CONFIG, s.get("client-id"));
        }
        // Internal topics of a one-node test broker.
        p.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, "1");
        for (Map.Entry<String, String> e : s.entrySet()) {
            if (e.getKey().startsWith("config.")) {
                p.put(e.getKey().substring("config.".length()), e.getValue());
            }
        }
        return p;
    }

    static void say(String line) {
        synchronized (System.out) {
            System.out.println(PREFIX + line);
            System.out.flush();
        }
    }

    public static void main(String[] args) throws InterruptedException {
        Map<String, String> s;
        try {
            s = settings(args, System.getenv());
        } catch (Usage e) {
            System.err.println("fencewatch-streams: " + e.getMessage());
            System.exit(2);
            return;
        }
        Topology topology = topology(s.get("input"), s.get("output"));
        KafkaStreams streams;
        try {
            streams = new KafkaStreams(topology, properties(s));
        } catch (org.apache.kafka.common.config.ConfigException e) {
            System.err.println("fencewatch-streams: " + e.getMessage());
            System.exit(2);
            return;
        }
        CountDownLatch stopped = new CountDownLatch(1);
        AtomicBoolean failed = new AtomicBoolean(false);
        streams.setStateListener((now, before) -> {
            say("state=" + before + "->" + now);
            if (now == KafkaStreams.State.ERROR) {
                failed.set(true);
            }
            if (now == KafkaStreams.State.NOT_RUNNING || now == KafkaStreams.State.ERROR) {
                stopped.countDown();
            }
        });
        streams.setUncaughtExceptionHandler(e -> {
            say("error=" + e.getClass().getName() + ": " + String.valueOf(e.getMessage()).replace('\n', ' '));
            return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.REPLACE_THREAD;
        });
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            // Commits, leaves the group; a loaded machine can take seconds (the caller's grace is longer).
            boolean closed = streams.close(Duration.ofSeconds(CLOSE_TIMEOUT_S));
            // close() returns once the state is NOT_RUNNING, but the listener says so on the thread
            // that set it, perhaps later: wait for its line, or the JVM halts before it is written.
            try {
                closed &= stopped.await(CLOSE_TIMEOUT_S, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            say(closed ? "stopped" : "stopped close-timed-out-after=" + CLOSE_TIMEOUT_S + "s");
        }, "fencewatch-streams-shutdown"));
        say("started application.id=" + s.get("application-id") + " group.protocol=" + s.get("group-protocol")
            + " processing.guarantee=" + s.get("processing-guarantee") + " num.stream.threads="
            + s.getOrDefault("num-stream-threads", "1"));
        streams.start();
        stopped.await();
        // ERROR (every thread died): exit 1 after the shutdown hook closed the client.
        System.exit(failed.get() ? 1 : 0);
    }
}
