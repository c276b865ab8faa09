// The TCP store beyond the Store contract: its port (0 picks one; one in use is an Error naming it), connecting to
// nothing, a server that stops under its clients, peers that are not fast-llm stores on either side, and one store
// shared by threads. Loopback only; every port comes from binding port 0.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "distributed/distributed_test_util.h"
#include "fast_llm/core/error.h"
#include "fast_llm/distributed/store.h"
#include "fast_llm/distributed/tcp_store_protocol.h"

namespace fast_llm::distributed {
namespace {

using std::chrono::milliseconds;

constexpr milliseconds kPatient{60000};
constexpr auto kBound = std::chrono::seconds(30);

using fast_llm::testing::error_of;

std::vector<uint8_t> bytes(const std::string& text) { return {text.begin(), text.end()}; }
std::string text(const std::vector<uint8_t>& value) { return {value.begin(), value.end()}; }

// A plain socket to 127.0.0.1:port, for speaking to the server as a stranger would.
class RawConnection {
 public:
  explicit RawConnection(int port) : descriptor_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(static_cast<uint16_t>(port));
    connected_ = ::connect(descriptor_, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0;
  }
  ~RawConnection() { ::close(descriptor_); }
  bool connected() const { return connected_; }
  void send(const std::vector<uint8_t>& data) const {
    ASSERT_EQ(::send(descriptor_, data.data(), data.size(), MSG_NOSIGNAL), static_cast<ssize_t>(data.size()));
  }
  // Whether the server closed this connection within the bound (reading and dropping what it sent before).
  bool closed_by_server() const {
    const auto deadline = std::chrono::steady_clock::now() + kBound;
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd entry{descriptor_, POLLIN, 0};
      if (::poll(&entry, 1, 1000) <= 0) continue;
      char buffer[256];
      const ssize_t received = ::recv(descriptor_, buffer, sizeof(buffer), 0);
      if (received <= 0) return true;
    }
    return false;
  }

 private:
  int descriptor_;
  bool connected_ = false;
};

// A listening socket on a free loopback port that is not a store.
class RawListener {
 public:
  RawListener() : descriptor_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t size = sizeof(address);
    EXPECT_EQ(::bind(descriptor_, reinterpret_cast<const sockaddr*>(&address), sizeof(address)), 0);
    EXPECT_EQ(::listen(descriptor_, 4), 0);
    EXPECT_EQ(::getsockname(descriptor_, reinterpret_cast<sockaddr*>(&address), &size), 0);
    port_ = ntohs(address.sin_port);
  }
  ~RawListener() { ::close(descriptor_); }
  int port() const { return port_; }
  int descriptor() const { return descriptor_; }

 private:
  int descriptor_;
  int port_ = 0;
};

TEST(TcpStoreTest, PortZeroPicksAFreePort) {
  const auto first = tcp_store("127.0.0.1", 0, 0, kPatient);
  const auto second = tcp_store("127.0.0.1", 0, 0, kPatient);
  const int port = tcp_store_port(*first);
  EXPECT_GT(port, 0);
  EXPECT_NE(port, tcp_store_port(*second));
  EXPECT_EQ(first->describe(), fmt::format("tcp store 127.0.0.1:{}", port));
  // The two are separate stores.
  first->set("key", bytes("first"));
  second->set("key", bytes("second"));
  EXPECT_EQ(text(tcp_store("127.0.0.1", port, 1, kPatient)->get("key")), "first");
}

TEST(TcpStoreTest, PortInUseIsAnErrorNamingIt) {
  const auto store = tcp_store("127.0.0.1", 0, 0, kPatient);
  const int port = tcp_store_port(*store);
  const std::string message = error_of([&] { tcp_store("127.0.0.1", port, 0, kPatient); });
  EXPECT_NE(message.find("[distributed]"), std::string::npos) << message;
  EXPECT_NE(message.find(fmt::format("port {} is already in use", port)), std::string::npos) << message;
  EXPECT_NE(message.find("MASTER_PORT"), std::string::npos) << message;
  // The first store still serves.
  store->set("still", bytes("here"));
  EXPECT_EQ(text(store->get("still")), "here");
}

TEST(TcpStoreTest, InvalidArguments) {
  EXPECT_NE(error_of([] { tcp_store("127.0.0.1", 0, 1, kPatient); }).find("port 0"), std::string::npos);
  EXPECT_NE(error_of([] { tcp_store("127.0.0.1", 70000, 1, kPatient); }).find("port 70000"), std::string::npos);
  EXPECT_NE(error_of([] { tcp_store("127.0.0.1", 0, -1, kPatient); }).find("rank -1"), std::string::npos);
  EXPECT_NE(error_of([] { tcp_store("127.0.0.1", 0, 0, milliseconds(0)); }).find("timeout"), std::string::npos);
  const std::string folder = ::testing::TempDir() + "fast_llm_tcp_store_test_not_tcp";
  const auto file = file_store(folder, kPatient);
  EXPECT_NE(error_of([&] { tcp_store_port(*file); }).find("is not a tcp store"), std::string::npos);
  std::filesystem::remove_all(folder);
}

TEST(TcpStoreTest, ConnectingToNothingFailsWithinTheTimeout) {
  // A port nobody listens on: one a store had, then gave back.
  int port = 0;
  {
    const auto gone = tcp_store("127.0.0.1", 0, 0, kPatient);
    port = tcp_store_port(*gone);
  }
  const auto start = std::chrono::steady_clock::now();
  const std::string message = error_of([&] { tcp_store("127.0.0.1", port, 3, milliseconds(500)); });
  EXPECT_LT(std::chrono::steady_clock::now() - start, kBound);
  EXPECT_NE(message.find(fmt::format("cannot connect to 127.0.0.1:{} within 500 ms", port)), std::string::npos)
      << message;
  EXPECT_NE(message.find("MASTER_ADDR"), std::string::npos) << message;
}

TEST(TcpStoreTest, AClientConnectsToAServerThatStartsLater) {
  // The client retries while rank 0 is not up yet: reserve a port, free it, and start the server there a little later.
  int port = 0;
  {
    const auto reserve = tcp_store("127.0.0.1", 0, 0, kPatient);
    port = tcp_store_port(*reserve);
  }
  std::shared_ptr<Store> server;
  std::thread starter([&] {
    std::this_thread::sleep_for(milliseconds(300));
    server = tcp_store("127.0.0.1", port, 0, kPatient);
    server->set("ready", bytes("yes"));
  });
  const auto client = tcp_store("127.0.0.1", port, 1, kPatient);
  EXPECT_EQ(text(client->get("ready")), "yes");
  starter.join();
}

TEST(TcpStoreTest, ClientOfAStoppedServerGetsAnError) {
  auto server = tcp_store("127.0.0.1", 0, 0, kPatient);
  const auto client = tcp_store("127.0.0.1", tcp_store_port(*server), 1, kPatient);
  client->set("before", bytes("1"));
  server.reset();  // stops the server thread
  const auto start = std::chrono::steady_clock::now();
  const std::string message = error_of([&] { client->get("before"); });
  EXPECT_LT(std::chrono::steady_clock::now() - start, kBound);
  EXPECT_NE(message.find("closed the connection"), std::string::npos) << message;
  EXPECT_NE(message.find("'before'"), std::string::npos) << message;
  // Every later call fails too, at once, with the first reason.
  const std::string later = error_of([&] { client->add("counter", 1); });
  EXPECT_NE(later.find("failed earlier"), std::string::npos) << later;
}

TEST(TcpStoreTest, AWaitingClientGetsAnErrorWhenTheServerStops) {
  auto server = tcp_store("127.0.0.1", 0, 0, kPatient);
  const auto client = tcp_store("127.0.0.1", tcp_store_port(*server), 1, kPatient);
  std::string message;
  std::thread waiter([&] { message = error_of([&] { client->wait({"never"}); }); });
  std::this_thread::sleep_for(milliseconds(100));
  const auto start = std::chrono::steady_clock::now();
  server.reset();
  waiter.join();
  // Well before the 60 s timeout.
  EXPECT_LT(std::chrono::steady_clock::now() - start, kBound);
  EXPECT_NE(message.find("closed the connection"), std::string::npos) << message;
}

TEST(TcpStoreTest, StrangersDoNotHurtTheServer) {
  using namespace tcp_store_protocol;
  const auto store = tcp_store("127.0.0.1", 0, 0, milliseconds(2000));
  const int port = tcp_store_port(*store);
  {
    // Connects and leaves at once.
    RawConnection quiet(port);
    EXPECT_TRUE(quiet.connected());
  }
  {
    // Speaks HTTP: the length it seems to announce is far beyond a frame; the server hangs up.
    RawConnection http(port);
    http.send(bytes("GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
    EXPECT_TRUE(http.closed_by_server());
  }
  {
    // A well-formed set without the greeting first: dropped, and the value is not stored.
    RawConnection rude(port);
    FrameWriter writer;
    writer.u8(static_cast<uint8_t>(Command::set)).string("injected").bytes(bytes("x"));
    rude.send(writer.frame());
    EXPECT_TRUE(rude.closed_by_server());
  }
  {
    // Greets, parks a get, then vanishes while the server holds it.
    RawConnection leaver(port);
    FrameWriter hello;
    hello.u8(static_cast<uint8_t>(Command::hello)).u64(kMagic).u32(kVersion);
    leaver.send(hello.frame());
    FrameWriter get;
    get.u8(static_cast<uint8_t>(Command::get)).u64(60000).string("later");
    leaver.send(get.frame());
    // A truncated frame after it.
    leaver.send({200, 0, 0, 0, 1, 2});
  }
  std::this_thread::sleep_for(milliseconds(50));
  store->set("later", bytes("served"));
  EXPECT_EQ(text(store->get("later")), "served");
  const auto other = tcp_store("127.0.0.1", port, 1, milliseconds(2000));
  EXPECT_EQ(text(other->get("later")), "served");
  EXPECT_NE(error_of([&] { other->get("injected"); }).find("'injected'"), std::string::npos);
}

TEST(TcpStoreTest, AServerThatIsNotAStoreIsAnError) {
  // Something else on the port (as torchrun's agent on MASTER_PORT would be): it answers in its own protocol.
  RawListener listener;
  std::thread impostor([&] {
    const int connection = ::accept(listener.descriptor(), nullptr, nullptr);
    if (connection < 0) return;
    char buffer[256];
    [[maybe_unused]] const ssize_t received = ::recv(connection, buffer, sizeof(buffer), 0);
    const std::string answer = "HTTP/1.1 400 Bad Request\r\n\r\n";
    ::send(connection, answer.data(), answer.size(), MSG_NOSIGNAL);
    ::close(connection);
  });
  const auto start = std::chrono::steady_clock::now();
  const std::string message = error_of([&] { tcp_store("127.0.0.1", listener.port(), 1, milliseconds(5000)); });
  impostor.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, kBound);
  EXPECT_NE(message.find("greeting the server"), std::string::npos) << message;
  EXPECT_NE(message.find("not this protocol"), std::string::npos) << message;
}

TEST(TcpStoreTest, OneStoreSharedByThreads) {
  const auto store = tcp_store("127.0.0.1", 0, 0, kPatient);
  constexpr int kThreads = 4;
  constexpr int kAdds = 100;
  std::vector<std::thread> threads;
  for (int thread = 0; thread < kThreads; ++thread) {
    threads.emplace_back([&, thread] {
      for (int add = 0; add < kAdds; ++add) store->add("shared", 1);
      store->set(fmt::format("thread_{}", thread), bytes("done"));
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(store->add("shared", 0), kThreads * kAdds);
  store->wait({"thread_0", "thread_1", "thread_2", "thread_3"});
}

TEST(TcpStoreTest, LargeValuesRoundTrip) {
  const auto server = tcp_store("127.0.0.1", 0, 0, kPatient);
  const auto client = tcp_store("127.0.0.1", tcp_store_port(*server), 1, kPatient);
  std::vector<uint8_t> large(8 << 20);
  for (size_t index = 0; index < large.size(); ++index) large[index] = static_cast<uint8_t>(index * 131 + 7);
  client->set("large", large);
  EXPECT_EQ(server->get("large"), large);
}

}  // namespace
}  // namespace fast_llm::distributed
