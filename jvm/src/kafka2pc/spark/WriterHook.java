package kafka2pc.spark;

import org.apache.kafka.clients.producer.Producer;

/**
 * The JVM writer's one extension point, off unless named: a class implementing this, named
 * in the task local property (or, on Spark Connect, the session setting) {@value #PROPERTY}
 * as {@code class[:argument]}, is loaded in each writing task by the task's class loader,
 * built with its public {@code (String argument)} constructor, and called before the task
 * opens its transaction and after every record the task hands to its producer.
 *
 * <p>Why it exists: the tests' fault injection (a task that dies, fails or halts its JVM
 * mid-transaction) lives in a test jar of its own ({@code jvm/test-src}), never in this
 * one; this interface is all it needs from the product. The jar ships no implementation.
 * What a hook throws fails the task as any write error does (its transaction aborted);
 * a hook that closes the producer first leaves the transaction open, as a dead executor.
 */
public interface WriterHook {
    /** The property naming the hook: {@code class[:argument]}. */
    String PROPERTY = "kafka2pc.writer.hook";

    /**
     * Called after the task's {@code sent}th record went to {@code producer} (sent, not
     * necessarily delivered: {@code producer.flush()} waits for that).
     */
    void afterSend(int partition, int attempt, long sent, Producer<byte[], byte[]> producer);

    /**
     * Called once, when the task is about to open its transaction (its first row is there;
     * no producer yet): a hook that delays here plays a task that opens late. Then the task
     * asks Spark whether it was killed meanwhile, as it always does before it opens.
     */
    default void beforeOpen(int partition, int attempt) {
    }
}
