package kafka2pc.spark;

import org.apache.spark.sql.api.java.UDF1;

/**
 * The positive murmur2 hash of a record key, as Kafka's Java producer partitions it
 * ({@code Utils.toPositive(Utils.murmur2(key))}; the partition is this modulo the topic's).
 *
 * <p>Why in the JVM: Kafka-aligned partitioning needs each row's Kafka partition before
 * Spark's shuffle. Spark SQL has no murmur2; a Java UDF is code-generated and costs about
 * what Spark's own {@code hash} does, where a Python UDF sends every key to Python and back.
 */
public final class KafkaKeyHash implements UDF1<byte[], Integer> {
    private static final long serialVersionUID = 1L;

    private static final int SEED = 0x9747b28c;
    private static final int M = 0x5bd1e995;
    private static final int R = 24;

    @Override
    public Integer call(byte[] key) {
        return key == null ? null : murmur2(key) & 0x7fffffff;
    }

    /** Kafka's {@code Utils.murmur2}: 4-byte little-endian words, then the 0-3 tail bytes. */
    public static int murmur2(byte[] data) {
        final int length = data.length;
        int h = SEED ^ length;
        final int words = length / 4;
        for (int i = 0; i < words; i++) {
            final int at = i * 4;
            int k = (data[at] & 0xff) | (data[at + 1] & 0xff) << 8
                    | (data[at + 2] & 0xff) << 16 | (data[at + 3] & 0xff) << 24;
            k *= M;
            k ^= k >>> R;
            k *= M;
            h *= M;
            h ^= k;
        }
        final int tail = words * 4;
        final int rest = length % 4;
        if (rest == 3) {
            h ^= (data[tail + 2] & 0xff) << 16;
        }
        if (rest >= 2) {
            h ^= (data[tail + 1] & 0xff) << 8;
        }
        if (rest >= 1) {
            h ^= data[tail] & 0xff;
            h *= M;
        }
        h ^= h >>> 13;
        h *= M;
        h ^= h >>> 15;
        return h;
    }
}
