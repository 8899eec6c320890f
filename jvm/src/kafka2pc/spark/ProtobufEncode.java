package kafka2pc.spark;

import com.google.protobuf.ByteString;
import com.google.protobuf.DescriptorProtos.FileDescriptorProto;
import com.google.protobuf.Descriptors.Descriptor;
import com.google.protobuf.Descriptors.DescriptorValidationException;
import com.google.protobuf.Descriptors.FieldDescriptor;
import com.google.protobuf.Descriptors.FileDescriptor;
import com.google.protobuf.DynamicMessage;
import com.google.protobuf.InvalidProtocolBufferException;
import com.google.protobuf.TimestampProto;
import java.nio.ByteBuffer;
import java.sql.Timestamp;
import java.time.Instant;
import java.util.AbstractMap.SimpleImmutableEntry;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.api.java.UDF3;
import org.apache.spark.sql.types.StructField;
import scala.Tuple2;
import scala.collection.Iterator;

/**
 * A row (a struct) as the bytes of a Protobuf message, for the schema registry's wire format
 * (the header, magic byte, id and message indexes, is a literal the caller concatenates).
 *
 * <p>Why a UDF of our own: Spark's {@code spark-protobuf} is not served by Maven Central; the
 * message is built with protobuf-java's {@link DynamicMessage} from the descriptor the driver
 * compiled and registered, so the bytes follow that schema exactly. Arguments: the struct, the
 * serialized {@code FileDescriptorProto} (its only imports: Google's well-known
 * {@code timestamp.proto}), the message's full name. The descriptor is built once per JVM and
 * kept; each row costs a lookup by the same array (a literal: the same object every row).
 *
 * <p>A column maps to the field of its name (the driver checked the pair); null leaves a field
 * unset; a null inside an array or a map has no Protobuf form and fails the row with
 * {@link #NULL_MARK}, which the driver names back.
 */
public final class ProtobufEncode implements UDF3<Row, byte[], String, byte[]> {
    private static final long serialVersionUID = 1L;

    /** Starts the error of a null element (the driver recognises it). */
    public static final String NULL_MARK = "kafka2pc protobuf null";
    private static final String TIMESTAMP = "google.protobuf.Timestamp";
    /** Loaded with this class: a session without protobuf-java fails to register it. */
    private static final FileDescriptor WELL_KNOWN_TIMESTAMP = TimestampProto.getDescriptor();

    private static final Map<Map.Entry<String, ByteBuffer>, Descriptor> DESCRIPTORS =
            new ConcurrentHashMap<>();
    /** The last descriptor used, by the array it came from (one per export, in practice). */
    private transient volatile Cached last;

    @Override
    public byte[] call(Row row, byte[] file, String messageName) {
        if (row == null) {
            return null;
        }
        return toMessage(row, descriptor(file, messageName)).toByteArray();
    }

    private Descriptor descriptor(byte[] file, String messageName) {
        Cached seen = last;
        if (seen == null || seen.file != file || !seen.name.equals(messageName)) {
            Descriptor found = DESCRIPTORS.computeIfAbsent(
                    new SimpleImmutableEntry<>(messageName, ByteBuffer.wrap(file)),
                    k -> build(file, messageName));
            seen = new Cached(file, messageName, found);
            last = seen;
        }
        return seen.descriptor;
    }

    private static final class Cached {
        final byte[] file;
        final String name;
        final Descriptor descriptor;

        Cached(byte[] file, String name, Descriptor descriptor) {
            this.file = file;
            this.name = name;
            this.descriptor = descriptor;
        }
    }

    /** The message {@code messageName} of the serialized file descriptor {@code file}. */
    public static Descriptor build(byte[] file, String messageName) {
        try {
            FileDescriptorProto proto = FileDescriptorProto.parseFrom(file);
            FileDescriptor[] dependencies = new FileDescriptor[proto.getDependencyCount()];
            for (int i = 0; i < dependencies.length; i++) {
                String name = proto.getDependency(i);
                if (!name.equals(WELL_KNOWN_TIMESTAMP.getName())) {
                    throw new IllegalArgumentException("unsupported import " + name);
                }
                dependencies[i] = WELL_KNOWN_TIMESTAMP;
            }
            FileDescriptor built = FileDescriptor.buildFrom(proto, dependencies);
            String local = proto.getPackage().isEmpty()
                    ? messageName
                    : messageName.substring(proto.getPackage().length() + 1);
            String[] path = local.split("\\.");
            Descriptor found = built.findMessageTypeByName(path[0]);
            for (int i = 1; i < path.length && found != null; i++) {
                found = found.findNestedTypeByName(path[i]);
            }
            if (found == null) {
                throw new IllegalArgumentException("no message " + messageName);
            }
            return found;
        } catch (InvalidProtocolBufferException | DescriptorValidationException e) {
            throw new IllegalArgumentException("bad descriptor: " + e.getMessage(), e);
        }
    }

    /** {@code row} as a message of {@code type}: each column into the field of its name. */
    public static DynamicMessage toMessage(Row row, Descriptor type) {
        DynamicMessage.Builder builder = DynamicMessage.newBuilder(type);
        StructField[] fields = row.schema().fields();
        for (int i = 0; i < fields.length; i++) {
            Object value = row.get(i);
            if (value == null) {
                continue;
            }
            FieldDescriptor field = type.findFieldByName(fields[i].name());
            if (field == null) {
                throw new IllegalArgumentException(
                        "column " + fields[i].name() + " is not a field of " + type.getFullName());
            }
            if (field.isMapField()) {
                putEntries(builder, field, (scala.collection.Map<?, ?>) value);
            } else if (field.isRepeated()) {
                Iterator<?> items = ((scala.collection.Iterable<?>) value).iterator();
                while (items.hasNext()) {
                    builder.addRepeatedField(field, single(field, items.next()));
                }
            } else {
                builder.setField(field, single(field, value));
            }
        }
        return builder.build();
    }

    private static void putEntries(
            DynamicMessage.Builder builder, FieldDescriptor field, scala.collection.Map<?, ?> map) {
        Descriptor entry = field.getMessageType();
        FieldDescriptor key = entry.findFieldByNumber(1);
        FieldDescriptor value = entry.findFieldByNumber(2);
        Iterator<? extends Tuple2<?, ?>> pairs = map.iterator();
        while (pairs.hasNext()) {
            Tuple2<?, ?> pair = pairs.next();
            builder.addRepeatedField(field, DynamicMessage.newBuilder(entry)
                    .setField(key, single(key, pair._1()))
                    .setField(value, single(value, pair._2()))
                    .build());
        }
    }

    /** One value of {@code field}'s type (an element, for a repeated field). */
    private static Object single(FieldDescriptor field, Object value) {
        if (value == null) {
            throw new IllegalArgumentException(NULL_MARK + ": a null in the array or map "
                    + field.getFullName() + " (Protobuf has none there: filter or fill it)");
        }
        switch (field.getJavaType()) {
            case INT:
                return ((Number) value).intValue();
            case LONG:
                return ((Number) value).longValue();
            case FLOAT:
                return ((Number) value).floatValue();
            case DOUBLE:
                return ((Number) value).doubleValue();
            case BOOLEAN:
                return value;
            case STRING:
                return value.toString();
            case BYTE_STRING:
                return ByteString.copyFrom((byte[]) value);
            case MESSAGE:
                return message(field.getMessageType(), value);
            default:
                throw new IllegalArgumentException("field " + field.getFullName() + " of type "
                        + field.getType() + " is not written from a column");
        }
    }

    private static DynamicMessage message(Descriptor type, Object value) {
        if (!type.getFullName().equals(TIMESTAMP)) {
            return toMessage((Row) value, type);
        }
        Instant at = value instanceof Timestamp ? ((Timestamp) value).toInstant() : (Instant) value;
        return DynamicMessage.newBuilder(type)
                .setField(type.findFieldByNumber(1), at.getEpochSecond())
                .setField(type.findFieldByNumber(2), at.getNano())
                .build();
    }
}
