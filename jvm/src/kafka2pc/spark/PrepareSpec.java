package kafka2pc.spark;

import java.io.IOException;
import java.io.Serializable;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import java.util.Set;

import org.apache.spark.sql.types.StructType;

/**
 * What every partition of one prepare writes with: the topics, one transactional id per
 * partition, the producer settings, the timeout, the header names, the partitions a repair
 * selects and the encoded rows' schema. Built on the driver, shipped inside the task's
 * function object (never in the plan's text: {@link #toString()} names only the topics and
 * the number of ids, should anything print it).
 */
final class PrepareSpec implements Serializable {
    private static final long serialVersionUID = 1L;

    /** Client certificate and key files, read on the executor into a PEM key store. */
    static final String CERTIFICATE_FILE = "kafka2pc.ssl.certificate.location";
    static final String KEY_FILE = "kafka2pc.ssl.key.location";
    static final String DESCRIBE_TIMEOUT = "kafka2pc.describe.timeout.ms";

    final ArrayList<String> topics;
    final ArrayList<String> ids;
    private final HashMap<String, String> settings;
    final long transactionTimeoutMs;
    final ArrayList<String> headerNames;
    /** The partitions a loss repair writes; null: all of them. */
    private final Set<Integer> selected;
    /** The encoded rows' schema, from the driver: internal rows carry none. */
    final StructType schema;
    /** The {@link WriterHook} named on the driver (Connect); null: the task's local property. */
    final String hook;

    PrepareSpec(
            ArrayList<String> topics,
            ArrayList<String> ids,
            HashMap<String, String> settings,
            long transactionTimeoutMs,
            ArrayList<String> headerNames,
            Set<Integer> selected,
            StructType schema,
            String hook) {
        this.topics = topics;
        this.ids = ids;
        this.settings = settings;
        this.transactionTimeoutMs = transactionTimeoutMs;
        this.headerNames = headerNames;
        this.selected = selected;
        this.schema = schema;
        this.hook = hook;
    }

    @Override
    public String toString() {
        return "kafka2pc.JvmWriter(topics=" + topics + ", transactions=" + ids.size() + ")";
    }

    /** False for a partition a repair does not write: not even an InitProducerId. */
    boolean writes(int partition) {
        return selected == null || selected.contains(partition);
    }

    long describeTimeoutMs() {
        return Long.parseLong(settings.getOrDefault(DESCRIBE_TIMEOUT, "30000"));
    }

    Properties producerProperties(String tid) {
        Properties props = new Properties();
        for (Map.Entry<String, String> e : settings.entrySet()) {
            if (!e.getKey().startsWith("kafka2pc.")) {
                props.put(e.getKey(), e.getValue());
            }
        }
        keyStore(props);
        props.put("transactional.id", tid);
        props.put("transaction.timeout.ms", Long.toString(transactionTimeoutMs));
        props.put("enable.idempotence", "true");
        props.put("acks", "all");
        return props;
    }

    /** The settings the Admin client needs to reach the cluster: connection, security, backoff. */
    Properties adminProperties() {
        Properties props = new Properties();
        for (Map.Entry<String, String> e : settings.entrySet()) {
            String key = e.getKey();
            if (key.startsWith("ssl.") || key.startsWith("sasl.") || key.equals("bootstrap.servers")
                    || key.equals("security.protocol") || key.equals("client.id")
                    || key.equals("request.timeout.ms") || key.startsWith("retry.backoff.")) {
                props.put(key, e.getValue());
            }
        }
        keyStore(props);
        return props;
    }

    /** librdkafka's certificate and key files, as the Java client's PEM key store. */
    private void keyStore(Properties props) {
        String certificate = settings.get(CERTIFICATE_FILE);
        if (certificate == null) {
            return;
        }
        props.put("ssl.keystore.type", "PEM");
        props.put("ssl.keystore.certificate.chain", read(certificate));
        if (!settings.containsKey("ssl.keystore.key")) { // a key the driver decrypted
            props.put("ssl.keystore.key", read(settings.getOrDefault(KEY_FILE, certificate)));
        }
    }

    private static String read(String path) {
        try {
            return Files.readString(Path.of(path), StandardCharsets.US_ASCII);
        } catch (IOException exc) {
            throw new UncheckedIOException("cannot read " + path, exc);
        }
    }
}
