package io.megahour.alluxio;

import alluxio.proxy.s3.auth.Authenticator;
import alluxio.proxy.s3.auth.AwsAuthInfo;
import java.io.IOException;
import java.io.Reader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.attribute.BasicFileAttributes;
import java.nio.file.attribute.FileTime;
import java.nio.file.attribute.PosixFilePermission;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.time.Duration;
import java.time.Instant;
import java.time.LocalDateTime;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;
import java.time.format.DateTimeParseException;
import java.time.format.ResolverStyle;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Objects;
import java.util.Properties;
import java.util.Set;
import java.util.regex.Pattern;
import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Verifies the AWS Signature V4 of every request to Alluxio's S3 proxy against the keys in a properties file
 * ({@code ACCESS_KEY_ID=SECRET}, one a line, read as {@link Properties} reads: a backslash escapes, which
 * AWS-style secrets, made of letters, digits, {@code /} and {@code +}, never need).
 *
 * <p>The proxy builds the string-to-sign from the request itself and hands it over with the client's access
 * id and signature; this class recomputes the signature with the secret and compares. It is written instead of
 * calling Alluxio's {@code AuthorizationV4Validator}, which logs the derived signing key at INFO and compares
 * with {@code String.equals}.
 *
 * <p>The proxy creates a new instance for each request, so everything worth keeping (the parsed file, the
 * signing keys) lives in static fields. The file is re-read when its modification time, size or inode
 * changes, so a rotated key works without restarting the proxy. Every failure, a missing or unreadable file
 * included, rejects the request with one WARN line that names the access id and the reason, never the secret
 * or the signature.
 */
public final class SigV4Authenticator implements Authenticator {
  /** System property: the credentials file. */
  public static final String CREDENTIALS_FILE_PROPERTY = "megahour.s3.credentials.file";

  public static final String DEFAULT_CREDENTIALS_FILE = "/etc/alluxio/s3-credentials.properties";

  /** System property: how far x-amz-date may be from the proxy's clock, in seconds. */
  public static final String MAX_CLOCK_SKEW_PROPERTY = "megahour.s3.max.clock.skew.seconds";

  // The proxy itself accepts an x-amz-date up to 7 days off, far too long a window to replay a captured
  // request in; 15 minutes is what S3 allows.
  public static final long DEFAULT_MAX_CLOCK_SKEW_SECONDS = 900;

  static final String ALGORITHM = "AWS4-HMAC-SHA256";
  private static final String SERVICE = "s3";
  private static final String TERMINATOR = "aws4_request";
  // A proxy serves a handful of keys over at most two dates (around midnight) and one region.
  private static final int SIGNING_KEY_CACHE_SIZE = 64;
  private static final int MAX_LOGGED_CHARS = 128;

  private static final DateTimeFormatter AMZ_DATE =
      DateTimeFormatter.ofPattern("uuuuMMdd'T'HHmmss'Z'").withResolverStyle(ResolverStyle.STRICT);
  private static final Pattern SCOPE_DATE = Pattern.compile("[0-9]{8}");
  private static final Pattern REGION = Pattern.compile("[A-Za-z0-9._-]+");
  private static final Pattern HEX_SHA256 = Pattern.compile("[0-9a-f]{64}");

  private static final Logger LOG = LoggerFactory.getLogger(SigV4Authenticator.class);

  private static final Object RELOAD = new Object();
  // The last file read successfully; replaced whole, so a request never sees half of a reload.
  private static volatile Credentials current;

  /** The proxy instantiates the class by reflection ({@code Class.newInstance}). */
  public SigV4Authenticator() {}

  @Override
  public boolean isAuthenticated(AwsAuthInfo authInfo) {
    String accessId = authInfo == null ? null : authInfo.getAccessID();
    String reason;
    try {
      reason = rejection(authInfo, Instant.now());
    } catch (RuntimeException e) {
      // Whatever went wrong, the request is not let through.
      reason = "internal error: " + e.getClass().getName();
    }
    if (reason == null) {
      return true;
    }
    LOG.warn("S3 request rejected: access id {}: {}", printable(accessId), reason);
    return false;
  }

  /** Why the request must be rejected, or null when its signature holds. */
  private static String rejection(AwsAuthInfo authInfo, Instant now) {
    if (authInfo == null) {
      return "no authentication information";
    }
    String accessId = authInfo.getAccessID();
    String stringToSign = authInfo.getStringTosSign();
    if (accessId == null || accessId.isEmpty()) {
      return "no access id";
    }
    if (stringToSign == null || stringToSign.isEmpty()) {
      // The proxy leaves it empty for V2 signatures, which it cannot verify.
      return "no SigV4 string-to-sign (an AWS signature V2 or an unsigned request)";
    }
    String[] lines = stringToSign.split("\n", -1);
    if (lines.length != 4) {
      return "malformed string-to-sign: " + lines.length + " lines, not 4";
    }
    if (!ALGORITHM.equals(lines[0])) {
      return "algorithm " + printable(lines[0]) + " is not " + ALGORITHM;
    }
    LocalDateTime amzDate;
    try {
      amzDate = LocalDateTime.parse(lines[1], AMZ_DATE);
    } catch (DateTimeParseException e) {
      return "malformed x-amz-date " + printable(lines[1]);
    }
    String[] scope = lines[2].split("/", -1);
    if (scope.length != 4
        || !SCOPE_DATE.matcher(scope[0]).matches()
        || !REGION.matcher(scope[1]).matches()
        || !SERVICE.equals(scope[2])
        || !TERMINATOR.equals(scope[3])) {
      return "malformed credential scope " + printable(lines[2]);
    }
    if (!lines[1].startsWith(scope[0])) {
      return "credential scope date " + scope[0] + " is not x-amz-date's date " + lines[1].substring(0, 8);
    }
    long skew = Duration.between(amzDate.toInstant(ZoneOffset.UTC), now).getSeconds();
    long maxSkew = maxClockSkewSeconds();
    if (Math.abs(skew) > maxSkew) {
      return "x-amz-date "
          + lines[1]
          + " is "
          + Math.abs(skew)
          + " s "
          + (skew > 0 ? "behind" : "ahead of")
          + " the proxy's clock (at most "
          + maxSkew
          + " s allowed)";
    }
    if (!HEX_SHA256.matcher(lines[3]).matches()) {
      return "malformed canonical request hash";
    }
    Credentials credentials;
    try {
      credentials = credentials(credentialsFile());
    } catch (CredentialsUnavailable e) {
      return e.getMessage();
    }
    String secret = credentials.secrets.get(accessId);
    if (secret == null) {
      return "unknown access id (not in " + credentials.path + ")";
    }
    String signature = authInfo.getSignature();
    if (signature == null || signature.isEmpty()) {
      return "no signature";
    }
    byte[] expected = hex(hmac(credentials.signingKey(accessId, secret, scope), stringToSign))
        .getBytes(StandardCharsets.US_ASCII);
    // Constant time, so the time a rejection takes tells nothing about how much of a guess was right.
    if (!MessageDigest.isEqual(expected, signature.getBytes(StandardCharsets.US_ASCII))) {
      return "signature mismatch";
    }
    return null;
  }

  private static Path credentialsFile() {
    return Paths.get(System.getProperty(CREDENTIALS_FILE_PROPERTY, DEFAULT_CREDENTIALS_FILE));
  }

  private static long maxClockSkewSeconds() {
    String value = System.getProperty(MAX_CLOCK_SKEW_PROPERTY);
    if (value == null) {
      return DEFAULT_MAX_CLOCK_SKEW_SECONDS;
    }
    try {
      long seconds = Long.parseLong(value.trim());
      if (seconds >= 0) {
        return seconds;
      }
    } catch (NumberFormatException e) {
      // reported below
    }
    LOG.warn("{}={} is not a number of seconds; using {}", MAX_CLOCK_SKEW_PROPERTY, printable(value),
        DEFAULT_MAX_CLOCK_SKEW_SECONDS);
    return DEFAULT_MAX_CLOCK_SKEW_SECONDS;
  }

  /** The file's keys, read again only when the file is not the one read last. */
  private static Credentials credentials(Path path) throws CredentialsUnavailable {
    BasicFileAttributes attributes;
    try {
      attributes = Files.readAttributes(path, BasicFileAttributes.class);
    } catch (NoSuchFileException e) {
      current = null;
      throw new CredentialsUnavailable("credentials file " + path + " does not exist; every request is rejected");
    } catch (IOException | SecurityException e) {
      current = null;
      throw new CredentialsUnavailable(
          "credentials file " + path + " cannot be read (" + e + "); every request is rejected");
    }
    Credentials known = current;
    if (known != null && known.isFrom(path, attributes)) {
      return known;
    }
    synchronized (RELOAD) {
      known = current;
      if (known != null && known.isFrom(path, attributes)) {
        return known;
      }
      // The attributes are taken before the read: a write racing with it changes them again, so the next
      // request reads the file once more instead of keeping what was read half-way.
      Credentials loaded;
      try {
        loaded = Credentials.load(path, attributes);
      } catch (CredentialsUnavailable e) {
        current = null;
        throw e;
      }
      current = loaded;
      LOG.info("S3 credentials: {} access id(s) read from {}", loaded.secrets.size(), path);
      return loaded;
    }
  }

  private static byte[] hmac(byte[] key, String data) {
    try {
      Mac mac = Mac.getInstance("HmacSHA256");
      mac.init(new SecretKeySpec(key, "HmacSHA256"));
      return mac.doFinal(data.getBytes(StandardCharsets.UTF_8));
    } catch (GeneralSecurityException e) {
      throw new IllegalStateException("HmacSHA256 is not available", e);
    }
  }

  private static String hex(byte[] bytes) {
    char[] digits = "0123456789abcdef".toCharArray();
    char[] out = new char[bytes.length * 2];
    for (int i = 0; i < bytes.length; i++) {
      out[2 * i] = digits[(bytes[i] >> 4) & 0xf];
      out[2 * i + 1] = digits[bytes[i] & 0xf];
    }
    return new String(out);
  }

  /** A client-supplied string made safe for one log line: no control characters, bounded length. */
  static String printable(String value) {
    if (value == null) {
      return "(none)";
    }
    StringBuilder out = new StringBuilder();
    for (int i = 0; i < value.length() && i < MAX_LOGGED_CHARS; i++) {
      char c = value.charAt(i);
      out.append(c >= 0x20 && c < 0x7f ? c : '?');
    }
    if (value.length() > MAX_LOGGED_CHARS) {
      out.append("...");
    }
    return out.toString();
  }

  private static final class CredentialsUnavailable extends Exception {
    private static final long serialVersionUID = 1L;

    CredentialsUnavailable(String message) {
      super(message, null, false, false);
    }
  }

  /** One reading of the credentials file, with the signing keys derived from its secrets. */
  private static final class Credentials {
    final Path path;
    final FileTime modified;
    final long size;
    final Object fileKey;
    final Map<String, String> secrets;
    private final Map<String, byte[]> signingKeys =
        Collections.synchronizedMap(new BoundedMap<String, byte[]>(SIGNING_KEY_CACHE_SIZE));

    private Credentials(Path path, BasicFileAttributes attributes, Map<String, String> secrets) {
      this.path = path;
      this.modified = attributes.lastModifiedTime();
      this.size = attributes.size();
      this.fileKey = attributes.fileKey();
      this.secrets = secrets;
    }

    static Credentials load(Path path, BasicFileAttributes attributes) throws CredentialsUnavailable {
      Properties properties = new Properties();
      try (Reader reader = Files.newBufferedReader(path, StandardCharsets.UTF_8)) {
        properties.load(reader);
      } catch (IOException | IllegalArgumentException | SecurityException e) {
        // The exception names the file and the cause (permissions, bad encoding), never its content.
        throw new CredentialsUnavailable(
            "credentials file " + path + " cannot be read (" + e.getClass().getName() + "); every request is "
                + "rejected");
      }
      Map<String, String> secrets = new HashMap<>();
      for (String accessId : properties.stringPropertyNames()) {
        String secret = properties.getProperty(accessId).trim();
        if (accessId.isEmpty() || secret.isEmpty()) {
          LOG.warn("S3 credentials: access id {} in {} has no secret; it is ignored", printable(accessId), path);
          continue;
        }
        secrets.put(accessId, secret);
      }
      if (secrets.isEmpty()) {
        LOG.warn("S3 credentials: {} holds no access id; every request is rejected", path);
      }
      warnIfOthersCanRead(path);
      return new Credentials(path, attributes, Collections.unmodifiableMap(secrets));
    }

    private static void warnIfOthersCanRead(Path path) {
      try {
        Set<PosixFilePermission> permissions = Files.getPosixFilePermissions(path);
        if (permissions.contains(PosixFilePermission.OTHERS_READ)) {
          LOG.warn("S3 credentials: {} is readable by every user of this host; make it 0600 or 0640", path);
        }
      } catch (IOException | UnsupportedOperationException | SecurityException e) {
        // Only advice: the file was read, the keys are in use either way.
      }
    }

    boolean isFrom(Path other, BasicFileAttributes attributes) {
      return path.equals(other)
          && modified.equals(attributes.lastModifiedTime())
          && size == attributes.size()
          && Objects.equals(fileKey, attributes.fileKey());
    }

    /** kSigning for the scope (date, region, service); the key is per access id, the cache per file reading. */
    byte[] signingKey(String accessId, String secret, String[] scope) {
      String cacheKey = accessId + "\n" + scope[0] + "\n" + scope[1] + "\n" + scope[2];
      byte[] key = signingKeys.get(cacheKey);
      if (key == null) {
        key = hmac(("AWS4" + secret).getBytes(StandardCharsets.UTF_8), scope[0]);
        key = hmac(key, scope[1]);
        key = hmac(key, scope[2]);
        key = hmac(key, TERMINATOR);
        signingKeys.put(cacheKey, key);
      }
      return key;
    }
  }

  /** A least-recently-used map of at most {@code capacity} entries. */
  private static final class BoundedMap<K, V> extends LinkedHashMap<K, V> {
    private static final long serialVersionUID = 1L;
    private final int capacity;

    BoundedMap(int capacity) {
      super(16, 0.75f, true);
      this.capacity = capacity;
    }

    @Override
    protected boolean removeEldestEntry(Map.Entry<K, V> eldest) {
      return size() > capacity;
    }
  }
}
